// Makes tests/data/js_vectors.json and tests/data/rulvar_store.json: the
// JavaScript reference values kb's tests compare against. Run with Node 20:
//   cd tests/js && npm ci && node make_vectors.mjs
// Every value here is computed by real JavaScript (V8's Number#toString,
// JSON.stringify, Date#toISOString, node:crypto) and the RFC 8785 package
// `canonicalize` from npm; nothing is typed in by hand but the inputs.
import { createHash } from "node:crypto";
import { writeFileSync } from "node:fs";
import canonicalize from "canonicalize";

const sha256 = (text) => createHash("sha256").update(text).digest("hex");

// A small deterministic PRNG (mulberry32) so the random vectors are reproducible.
function mulberry32(seed) {
  return () => {
    seed |= 0; seed = (seed + 0x6d2b79f5) | 0;
    let t = Math.imul(seed ^ (seed >>> 15), 1 | seed);
    t = (t + Math.imul(t ^ (t >>> 7), 61 | t)) ^ t;
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}
const rand = mulberry32(8785);

function bitsOf(x) {
  const view = new DataView(new ArrayBuffer(8));
  view.setFloat64(0, x);
  return view.getBigUint64(0).toString(16).padStart(16, "0");
}
function randomDouble() {
  const view = new DataView(new ArrayBuffer(8));
  view.setUint32(0, Math.floor(rand() * 2 ** 32));
  view.setUint32(4, Math.floor(rand() * 2 ** 32));
  return view.getFloat64(0);
}

const fixedNumbers = [
  0, -0, 1, -1, 1.5, 0.1 + 0.2, 0.9333333333333333, 1e21, 1e-7, 1e-6, 1.5e-6, 1e20,
  1e16, 123456789012345680, 2 ** 53, 2 ** 53 + 2, -(2 ** 53), 5e-324, 1.7976931348623157e308,
  0.000001, 0.0000123, 1.23e-7, 100, 1e300, 333333333.33333333, 0.5, 0.25, 4.35, 0.07,
  9007199254740993, 295147905179352830000, 1e-323, 2.2250738585072014e-308,
];
const numbers = [];
for (const x of fixedNumbers) numbers.push({ bits: bitsOf(x), text: JSON.stringify(x) });
for (let i = 0; i < 400; i++) {
  const x = randomDouble();
  if (Number.isFinite(x)) numbers.push({ bits: bitsOf(x), text: JSON.stringify(x) });
}
for (let i = 0; i < 200; i++) {
  const x = Math.round(rand() * 1e6) / 10 ** Math.floor(rand() * 9);
  numbers.push({ bits: bitsOf(x), text: JSON.stringify(x) });
}

const unitsOf = (s) => Array.from({ length: s.length }, (_, i) => s.charCodeAt(i));
const fixedStrings = [
  "", "plain", 'quote " and backslash \\', "\b\t\n\f\r", "\u0000\u0001\u001f\u007f\u0080",
  "\u001c\u001d\u001e\u001f\u0085", "é ß ü 東京", "emoji 😀 and 👩‍👩‍👧", "\u2028\u2029",
  "\ufeff bom", "\ud800", "\udfff", "a\ud83dz", "\ude00\ud83d", "</script>", "/slash",
];
const strings = fixedStrings.map((s) => ({ units: unitsOf(s), json: JSON.stringify(s) }));
for (let i = 0; i < 200; i++) {
  const units = [];
  const n = Math.floor(rand() * 12);
  for (let j = 0; j < n; j++) {
    const pick = rand();
    units.push(pick < 0.2 ? Math.floor(rand() * 0x20) : pick < 0.3 ? 0xd800 + Math.floor(rand() * 0x800)
      : pick < 0.7 ? 0x20 + Math.floor(rand() * 0x60) : Math.floor(rand() * 0x10000));
  }
  const s = String.fromCharCode(...units);
  strings.push({ units: unitsOf(s), json: JSON.stringify(s) });
}

const jcsValues = [
  [],
  [{ b: 1.0, a: 0.9333333333333333, z: 1e21, y: 1e-7 }],
  { "\u{1F600}": 1, "\uFFFD": 2, "\u00e9": 3, a: 4, B: 5, "": 6 },
  { nested: { z: [3, 2, { y: null, x: true }], a: "é" }, n: -0, big: 2 ** 60 },
  [{ statement: "lone \ud800 surrogate", n: 1 }],
];
// rulvar's own JCS: keys sorted with Object.keys().sort() (UTF-16 order),
// primitives through JSON.stringify. It agrees with `canonicalize` wherever
// that package has an answer, and also hashes lone surrogates (which
// JSON.parse accepts and `canonicalize` refuses).
function rulvarStyleJcs(value) {
  if (Array.isArray(value)) return "[" + value.map(rulvarStyleJcs).join(",") + "]";
  if (value !== null && typeof value === "object") {
    return "{" + Object.keys(value).sort().filter((k) => value[k] !== undefined)
      .map((k) => JSON.stringify(k) + ":" + rulvarStyleJcs(value[k])).join(",") + "}";
  }
  return JSON.stringify(value);
}
function packageJcs(value) {
  try { return canonicalize(value); } catch (err) { return null; }
}
const jcs = jcsValues.map((value) => {
  const text = rulvarStyleJcs(value);
  const pkg = packageJcs(value);
  if (pkg !== null && pkg !== text) throw new Error(`JCS disagreement on ${JSON.stringify(value)}`);
  return { json: JSON.stringify(value), jcs: text, canonicalize: pkg, sha256: sha256(text) };
});

const DAYS = { "eval-measured": { strength: 90, weakness: 30 }, "human-editorial": { strength: 120, weakness: 45 } };
const observed = [
  "2026-07-01", "2026-07-01T00:00:00.000Z", "2026-11-29T02:00:00.000Z", "2024-02-29",
  "2026-12-31T23:59:59.999Z", "2026-07-01T12:30:00+02:00", "2026-07-01T12:30-05:30",
  "2026-07-01T00:00:00.1239Z", "2026-03-08T01:59:59Z", "2000-01-01", "2099-12-31T00:00:00Z",
  "2026-07-01T24:00:00Z",
];
const expiries = [];
for (const o of observed) for (const cls of Object.keys(DAYS)) for (const pol of ["strength", "weakness"]) {
  expiries.push({ observedAt: o, class: cls, polarity: pol, expiresAt: new Date(Date.parse(o) + DAYS[cls][pol] * 86400000).toISOString() });
}

// Canary outputs, normalized and fingerprinted the way rulvar does it:
// NFC, trim, collapse every \s run (JavaScript's set) to one space; then
// sha256 of JSON.stringify([probeCount, outputs]) through node:crypto.
const normalizeCanaryOutput = (text) => text.normalize("NFC").trim().replace(/\s+/gu, " ");
const canaryFingerprint = (outputs) => sha256(JSON.stringify([outputs.length, outputs]));
const rawOutputs = [
  "red, yellow, blue", "  Red,\n\tYellow,  Blue  ", "e\u0301te\u0301", "\u00e9t\u00e9",
  "\ufeffbom\ufeff", "a\u001cb\u001dc\u001ed\u001ff", "x\u0085y", "nbsp\u00a0here\u3000ideo",
  "line\u2028sep\u2029para", "quote \" and \\ backslash", "emoji 😀 👩‍👩‍👧", "lone \ud800 high",
  "lone \udc00 low", "ctrl \u0000\u0007\u001b", "", "   ", "!error", "1, 2, 3", "2024-02-29",
  "n-e-c-e-s-s-a-r-y", "tab\there\vvt\fff", "mixed\r\nnewlines\rhere", "\u1680ogham\u180emvs",
  "\u200bzero-width", "\u2000\u2001\u200aspaces\u202f\u205f",
];
const normalized = rawOutputs.map((raw) => ({ raw: unitsOf(raw), normalized: unitsOf(normalizeCanaryOutput(raw)) }));
const fingerprints = [];
for (let i = 0; i < 60; i++) {
  const count = 1 + Math.floor(rand() * 5);
  const outputs = [];
  for (let j = 0; j < count; j++) {
    const pick = rand();
    if (pick < 0.15) outputs.push(["!error", "!refused", "!exhausted", "!cancelled"][Math.floor(rand() * 4)]);
    else outputs.push(normalizeCanaryOutput(rawOutputs[Math.floor(rand() * rawOutputs.length)] + (rand() < 0.5 ? " " + i : "")));
  }
  fingerprints.push({ outputs: outputs.map(unitsOf), json: JSON.stringify([count, outputs]), fingerprint: canaryFingerprint(outputs) });
}
fingerprints.push({ outputs: [], json: JSON.stringify([0, []]), fingerprint: canaryFingerprint([]) });

writeFileSync(new URL("../data/js_vectors.json", import.meta.url), JSON.stringify({
  generator: "tests/js/make_vectors.mjs", node: process.version, numbers, strings, jcs, expiries,
  canary: { normalized, fingerprints },
}, null, 1) + "\n");

// A store exactly as rulvar's FileModelKnowledgeStore writes it.
const claims = [
  {
    id: "kb-sweep-2026-11-29T02:00:00.000Z/openai:gpt-4o-mini@low/extraction",
    subject: { model: "openai:gpt-4o-mini", effort: "low" },
    taskClass: "extraction", polarity: "strength",
    statement: "sweep passRate 1.00 over 20 extraction cases: at or above the strength band",
    class: "eval-measured", status: "active",
    evidence: [{ kind: "eval", reportId: "kb-sweep-2026-11-29T02:00:00.000Z", caseIds: ["capital-france", "invoice-total", "Zürich-date"] }],
    metrics: { passRate: 1.0, n: 20, graderId: "eval-suite", cost: 0.0000123 },
    confidence: "high", observedAt: "2026-11-29T02:00:00.000Z",
    expiresAt: new Date(Date.parse("2026-11-29T02:00:00.000Z") + 90 * 86400000).toISOString(),
    modelEpoch: { canaryFingerprint: sha256(JSON.stringify([2, ["red, green, blue", "1, 2, 3"]])) },
    author: { kind: "eval-pipeline", id: "eval-pipeline-ci" },
  },
  {
    id: "01JDNOTE0000000000000000",
    subject: { model: "anthropic:claude-haiku-4-5" },
    taskClass: "synthesis", polarity: "weakness",
    statement: "Résumés verlieren Nuancen — 長い文書で要点を落とす 😕",
    class: "human-editorial", status: "active",
    evidence: [{ kind: "journal", runId: "run-7f3a", entryRef: 12 }, { kind: "eval", reportId: "adhoc-1", caseIds: [] }],
    confidence: "medium", observedAt: "2026-10-01",
    expiresAt: new Date(Date.parse("2026-10-01") + 45 * 86400000).toISOString(),
    author: { kind: "human", id: "alice" },
    origin: { kind: "kb-proposal", runId: "run-7f3a", entryRef: 12 },
  },
  {
    id: "kb-sweep-2026-08-01T00:00:00.000Z/openai:gpt-4o-mini@low/extraction",
    subject: { model: "openai:gpt-4o-mini", effort: "low" },
    taskClass: "extraction", polarity: "weakness",
    statement: "sweep passRate 0.13 over 8 extraction cases: in the weakness band",
    class: "eval-measured", status: "superseded",
    evidence: [{ kind: "eval", reportId: "kb-sweep-2026-08-01T00:00:00.000Z", caseIds: ["a", "b"] }],
    metrics: { passRate: 0.125, n: 8, graderId: "eval-suite", cost: 1.23e-7, baseline: { model: "openai:gpt-4o", passRate: 0.75 } },
    confidence: "medium", observedAt: "2026-08-01T00:00:00.000Z",
    expiresAt: new Date(Date.parse("2026-08-01T00:00:00.000Z") + 30 * 86400000).toISOString(),
    author: { kind: "eval-pipeline", id: "eval-pipeline-ci" },
    supersedes: "kb-sweep-2026-07-01T00:00:00.000Z/openai:gpt-4o-mini@low/extraction",
  },
];
const store = { version: 7, hash: sha256(canonicalize(claims)), claims };
writeFileSync(new URL("../data/rulvar_store.json", import.meta.url), JSON.stringify(store, null, 2) + "\n");
