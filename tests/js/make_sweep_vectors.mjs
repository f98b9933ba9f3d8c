// Makes tests/data/rulvar_sweep_vectors.json: for a grid of sweep-cell inputs,
// the ModelClaim that rulvar itself emits (or null when it emits none).
//
// Nothing here re-implements rulvar. For every input the script runs rulvar's
// own sweep end to end, with a fake adapter standing in for the provider:
//   packages/evals  runSweepMatrix        (src/sweeps.ts: bands, id, statement,
//                                          confidence, complete-cell rule)
//                   -> commitEvalMeasured  (src/committer.ts: evalMeasuredClaim,
//                                          eval-committer gate, CAS loop)
//   packages/core   FileModelKnowledgeStore (src/knowledge/file-store.ts: writes
//                                          the claim), claimExpiry (src/knowledge/
//                                          decay.ts: expiresAt), createEngine,
//                                          defineWorkflow, InMemoryStore
//   packages/testing FakeAdapter, FAKE_MODEL_REF (the stand-in provider)
// Each cell has n cases. The first `passed` of them pass (a grader that passes
// by case index). The claim is read back from the store file rulvar wrote.
//
// Input fields that rulvar does not use:
//   `cost`: rulvar's sweep never puts a cost in metrics (sweeps.ts builds
//     metrics {passRate, n, graderId}), so no claim here has metrics.cost.
//     The field is kept so kb can compare its own claim with metrics.cost
//     taken out.
//   `canaryFingerprint` (on a few inputs) goes in through rulvar's
//     modelEpochFor hook and comes out as modelEpoch.canaryFingerprint.
//   `strength`/`weakness` equal to 0.9/0.5 are passed as "no thresholds", so
//     rulvar's own defaults (SWEEP_THRESHOLD_DEFAULTS) apply.
//
// Run with Node 20, on a rulvar checkout whose core, testing and evals
// packages are built (dist/index.js):
//   RULVAR_DIR=/tmp/rulvar node tests/js/make_sweep_vectors.mjs
//   node tests/js/make_sweep_vectors.mjs /tmp/rulvar
// (How the checkout was built is in tests/js/RULVAR.md.)
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';

process.removeAllListeners('warning'); // rulvar's InMemoryStore warns once

const RULVAR_DIR = resolve(process.argv[2] ?? process.env.RULVAR_DIR ?? '');
if (!process.argv[2] && !process.env.RULVAR_DIR) {
  console.error('usage: RULVAR_DIR=/path/to/rulvar node make_sweep_vectors.mjs');
  process.exit(2);
}
const load = (pkg) => import(pathToFileURL(join(RULVAR_DIR, 'packages', pkg, 'dist/index.js')).href);
const core = await load('core');
const evals = await load('evals');
const testing = await load('testing');

const OUT = join(dirname(fileURLToPath(import.meta.url)), '..', 'data', 'rulvar_sweep_vectors.json');

// One rulvar workflow per case name; the case name is the workflow name.
const SCHEMA = {
  type: 'object',
  properties: { answer: { type: 'number' } },
  required: ['answer'],
  additionalProperties: false,
};
const workflows = new Map();
function workflowNamed(name) {
  if (!workflows.has(name)) {
    workflows.set(
      name,
      core.defineWorkflow({ name }, async (ctx) =>
        ctx.agent('answer as JSON', { agentType: 'worker', schema: SCHEMA }),
      ),
    );
  }
  return workflows.get(name);
}

// Runs rulvar's sweep for one input; returns the claim rulvar wrote, or null.
async function rulvarClaim(input) {
  const cases = input.caseIds.map((name, index) => ({
    taskClass: input.taskClass,
    case: {
      workflow: workflowNamed(name),
      args: null,
      graders: [{ name: 'by-index', grade: () => ({ grader: 'by-index', passed: index < input.passed }) }],
    },
  }));
  const member = { model: input.model, ...(input.effort === undefined ? {} : { effort: input.effort }) };
  const dir = mkdtempSync(join(tmpdir(), 'rulvar-sweep-vec-'));
  try {
    const path = join(dir, 'rulvar.models.json');
    const store = new core.FileModelKnowledgeStore({ path });
    const isDefault = input.strength === 0.9 && input.weakness === 0.5;
    const report = await evals.runSweepMatrix(
      { models: [member], cases },
      {
        reportId: input.reportId,
        committerId: input.committer,
        observedAt: input.observedAt,
        store,
        ...(isDefault ? {} : { thresholds: { strength: input.strength, weakness: input.weakness } }),
        ...(input.canaryFingerprint === undefined
          ? {}
          : { modelEpochFor: () => ({ canaryFingerprint: input.canaryFingerprint }) }),
        engineFor: () =>
          core.createEngine({
            adapters: [new testing.FakeAdapter({ agents: { worker: { answer: 42 } } })],
            stores: { journal: new core.InMemoryStore() },
            defaults: {
              routing: { loop: testing.FAKE_MODEL_REF, extract: testing.FAKE_MODEL_REF },
              profiles: { worker: {} },
            },
          }),
      },
    );
    const cell = report.cells[0];
    if (cell.n !== input.caseIds.length || cell.passRate !== (input.passed / input.caseIds.length)) {
      throw new Error(`cell did not measure as planned: ${JSON.stringify(cell)}`);
    }
    if (report.claims.length === 0) return null;
    const written = JSON.parse(readFileSync(path, 'utf8'));
    if (written.claims.length !== 1) throw new Error('expected exactly one committed claim');
    return written.claims[0];
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

// ---- the grid -------------------------------------------------------------
const MODELS = ['openai:gpt-4o-mini', 'anthropic:claude-sonnet-4-5', 'openrouter:meta/llama-3.1-8b', 'fake:fake-model'];
const EFFORTS = [undefined, 'low', undefined, 'high', 'medium'];
const TASKS = ['extraction', 'code-edit', 'investigation', 'synthesis', 'planning', 'judging', 'sql-gen'];
const OBSERVED = [
  '2026-11-29T02:00:00.000Z',
  '2026-07-01',
  '2026-07-01T00:00:00.000Z',
  '2024-02-29T12:34:56.789Z',
  '2026-12-31T23:59:59.999Z',
  '2026-03-08T01:30:00.000Z',
];
const COMMITTERS = ['kb', 'ci-evals'];
const COSTS = [0.0123, 0, 1.5, 0.30000000000000004, 12.3456789];
const BANDS = [[0.9, 0.5], [0.8, 0.3], [0.95, 0.6], [1, 0], [0.75, 0.7499]];

// k values worth checking for n cases under (strength, weakness).
function ksFor(n, strength, weakness) {
  const ks = new Set([0, 1, Math.floor(n / 2), Math.ceil(n / 2), n - 1, n]);
  for (const t of [strength, weakness]) {
    for (const k of [Math.floor(t * n) - 1, Math.floor(t * n), Math.ceil(t * n), Math.ceil(t * n) + 1]) ks.add(k);
  }
  return [...ks].filter((k) => k >= 0 && k <= n).sort((a, b) => a - b);
}

const inputs = [];
let i = 0;
function push(n, passed, strength, weakness, extra = {}) {
  const taskClass = extra.taskClass ?? TASKS[i % TASKS.length];
  const observedAt = extra.observedAt ?? OBSERVED[i % OBSERVED.length];
  const effort = 'effort' in extra ? extra.effort : EFFORTS[i % EFFORTS.length];
  const input = {
    passed,
    n,
    strength,
    weakness,
    model: extra.model ?? MODELS[i % MODELS.length],
    ...(effort === undefined ? {} : { effort }),
    taskClass,
    reportId: extra.reportId ?? (i % 3 === 0 ? 'nightly-42' : `kb-sweep-${observedAt}`),
    observedAt,
    committer: COMMITTERS[i % COMMITTERS.length],
    caseIds: Array.from({ length: n }, (_, c) => `c${String(c + 1).padStart(2, "0")}`),
    cost: extra.cost ?? COSTS[i % COSTS.length],
    ...(extra.canaryFingerprint === undefined ? {} : { canaryFingerprint: extra.canaryFingerprint }),
  };
  inputs.push(input);
  i += 1;
}
for (const [strength, weakness] of BANDS) {
  const ns = strength === 0.9 || strength === 0.8 || strength === 0.95
    ? Array.from({ length: 40 }, (_, j) => j + 1)
    : [1, 2, 3, 4, 5, 8, 10, 15, 20, 40];
  for (const n of ns) for (const k of ksFor(n, strength, weakness)) push(n, k, strength, weakness);
}
// Named spot checks: toFixed rounding, the singular "case", effort on/off,
// odd instants rulvar passes straight through, a canary fingerprint.
push(15, 14, 0.9, 0.5, { taskClass: 'extraction', effort: 'low', model: 'openai:gpt-4o-mini', cost: 0.0123 });
push(15, 14, 0.9, 0.5, { taskClass: 'extraction', effort: undefined, model: 'openai:gpt-4o-mini', cost: 0 });
push(8, 1, 0.9, 0.5, { taskClass: 'judging', effort: undefined });
push(8, 1, 0.9, 0.5, { taskClass: 'judging', effort: 'high' });
push(1, 1, 0.9, 0.5, { taskClass: 'planning', effort: undefined });
push(1, 0, 0.9, 0.5, { taskClass: 'planning', effort: 'medium' });
push(40, 39, 0.9, 0.5, { taskClass: 'synthesis', effort: undefined });
push(20, 18, 0.9, 0.5, { canaryFingerprint: 'a'.repeat(64) });
push(5, 0, 0.9, 0.5, { canaryFingerprint: '0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef' });
push(10, 10, 0.9, 0.5, { observedAt: '2026-07-01T00:00:00+02:00' });
push(10, 0, 0.9, 0.5, { observedAt: '2026-07-01T00:00:00.0159999999Z' });
push(10, 10, 0.9, 0.5, { observedAt: '2026-03-29T01:30:00.000Z', reportId: 'r' });

const vectors = [];
for (const input of inputs) vectors.push({ input, claim: await rulvarClaim(input) });

// One vector per line: small diffs, still plain JSON.
writeFileSync(OUT, `[\n${vectors.map((v) => JSON.stringify(v)).join(',\n')}\n]\n`);
const emitted = vectors.filter((v) => v.claim !== null).length;
console.log(`wrote ${OUT}: ${vectors.length} vectors, ${emitted} with a claim`);
