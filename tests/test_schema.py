"""The shared vocabulary: one model-ref parser, one subject key, closed sets defined once."""

from __future__ import annotations

from typing import get_args

import click
import pytest
from hypothesis import given
from hypothesis import strategies as st
from pydantic import ValidationError

from kb import schema
from kb.cli import cli
from kb.errors import ConfigError
from kb.schema import ModelRef, ModelRefError, StrictModel, Subject, validation_issues
from kb.store.editorial import editorial_claim
from kb.store.ops import OpCounts
from tests.factories import eval_claim

BAD_REFS = [":", "openai:", ":gpt", "gpt-4o", ""]


@pytest.mark.parametrize("text", BAD_REFS)
def test_a_ref_needs_a_provider_and_a_model(text: str) -> None:
    with pytest.raises(ModelRefError, match="must be 'provider:model'"):
        ModelRef.parse(text)


@pytest.mark.parametrize("text", [":", "openai:", ":gpt"])
def test_the_claim_model_refuses_what_the_spec_refuses(text: str) -> None:
    """Before the schema layer, a claim accepted ':', 'openai:' and ':gpt'."""
    with pytest.raises(ValidationError) as caught:
        eval_claim(subject={"model": text})
    assert validation_issues("", caught.value)[0].startswith("subject.model: ")


@pytest.mark.parametrize("text", [":", "openai:", ":gpt"])
def test_a_note_about_a_malformed_ref_is_refused(text: str) -> None:
    with pytest.raises(ConfigError, match="--model: .* must be 'provider:model'"):
        editorial_claim(
            model=text,
            effort=None,
            task_class="extraction",
            polarity="weakness",
            statement="x",
            approver="a",
            evidence=[],
            observed_at=0,
        )


_part = st.text(alphabet=st.characters(blacklist_characters=":"), min_size=1, max_size=12)


@given(_part, st.text(min_size=1, max_size=20))
def test_parse_splits_at_the_first_colon_and_round_trips(provider: str, name: str) -> None:
    ref = ModelRef.parse(f"{provider}:{name}")
    assert (ref.provider, ref.name) == (provider, name)
    assert str(ref) == f"{provider}:{name}"
    assert ref.litellm_route == f"{provider}/{name}"


@given(_part, _part, st.one_of(st.none(), st.text(min_size=1, max_size=8)))
def test_one_subject_key_formula(provider: str, name: str, effort: str | None) -> None:
    subject = Subject(f"{provider}:{name}", effort)
    assert subject.key == (f"{provider}:{name}@{effort}" if effort else f"{provider}:{name}")
    assert Subject.from_wire(subject.to_wire()) == subject
    assert ("effort" in subject.to_wire()) == bool(effort)


def test_closed_sets_are_their_literals() -> None:
    assert schema.POLARITIES == get_args(schema.Polarity) == ("strength", "weakness")
    assert schema.ARCHIVE_REASONS == get_args(schema.ArchiveReason)
    assert schema.RULED_OUT_VALUES == get_args(schema.RuledOut)
    assert schema.CLAIM_STATUSES == get_args(schema.ClaimStatus)
    assert schema.CONFIDENCES == get_args(schema.Confidence)


def _choices(command: str, option: str) -> tuple[str, ...]:
    ctx = click.Context(cli)
    params = {p.name: p for p in cli.get_command(ctx, command).params}  # type: ignore[union-attr]
    choice = params[option].type
    assert isinstance(choice, click.Choice)
    return tuple(choice.choices)


def test_cli_choices_come_from_the_schema() -> None:
    assert _choices("note", "ruled_out") == schema.RULED_OUT_VALUES
    assert _choices("note", "polarity") == schema.POLARITIES
    assert _choices("note", "confidence") == schema.CONFIDENCES
    assert _choices("archive", "reason") == schema.ARCHIVE_REASONS
    assert _choices("list", "statuses") == schema.CLAIM_STATUSES


def test_commit_messages_name_every_archive_reason() -> None:
    counts = OpCounts(archived={reason: 1 for reason in schema.ARCHIVE_REASONS})
    text = counts.describe()
    assert all(reason in text for reason in schema.ARCHIVE_REASONS)


def test_unknown_keys_are_named_as_such() -> None:
    class Shape(StrictModel):
        name: str

    with pytest.raises(ValidationError) as caught:
        Shape.model_validate({"name": "a", "nmae": "b"})
    assert validation_issues("spec", caught.value) == ["spec.nmae: unknown key"]
    issues: list[str] = []
    assert schema.validate_into(Shape, {"name": 3}, "x", issues) is None
    assert issues == ["x.name: Input should be a valid string (got 3)"]
