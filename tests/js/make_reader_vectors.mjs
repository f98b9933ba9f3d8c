// Makes tests/data/rulvar_reader_vectors.json (what rulvar's store reader
// accepts and what its writer writes back) and tests/data/v8_instant_vectors.json
// (how V8's Date.parse reads instant strings, which is how rulvar reads
// observedAt/expiresAt).
//
// What it uses from rulvar, all from packages/core/dist/index.js:
//   FileModelKnowledgeStore (src/knowledge/file-store.ts)
//     .current()  : the reader. readFileSync utf8, JSON.parse, then
//                   validateKnowledgeSnapshot (structure and hash check).
//     .commit([], v): the writer, given no ops: re-reads, re-validates, and
//                   writes JSON.stringify({version: v + 1, hash, claims}, null, 2)
//                   plus "\n". Its output is `rerendered`.
//   knowledgeHash   (same file): sha256 of jcsSerialize(claims) (src/l0/jcs.ts).
//                   Each input file gets the hash rulvar computes for its
//                   claims, except where a vector is about a wrong hash.
//
// Each vector is {name, topic, file, fileBase64?, accepted, read?, rerendered?,
// rerenderError?, error?, errorType?, instants?}. `file` is the exact input
// text. Where `fileBase64` is present, those bytes are the real input (not
// valid UTF-8) and `file` is how Node decodes them. `instants` holds the
// first claim's observedAt/expiresAt as Date.parse reads them with TZ=UTC
// (null for NaN). `localTime` is added when the value depends on the time zone.
// Messages have the temp path replaced by "rulvar.models.json".
//
// Run with Node 20, on a rulvar checkout whose packages/core is built:
//   RULVAR_DIR=/tmp/rulvar node tests/js/make_reader_vectors.mjs
//   node tests/js/make_reader_vectors.mjs /tmp/rulvar
// (How the checkout was built is in tests/js/RULVAR.md.)
process.env.TZ = 'UTC'; // Date.parse of a local-time string depends on this
import { createHash } from 'node:crypto';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';

if (!process.argv[2] && !process.env.RULVAR_DIR) {
  console.error('usage: RULVAR_DIR=/path/to/rulvar node make_reader_vectors.mjs');
  process.exit(2);
}
const RULVAR_DIR = resolve(process.argv[2] ?? process.env.RULVAR_DIR);
const core = await import(pathToFileURL(join(RULVAR_DIR, 'packages/core/dist/index.js')).href);
const { FileModelKnowledgeStore, knowledgeHash } = core;

const DATA = join(dirname(fileURLToPath(import.meta.url)), '..', 'data');

// ---- building input files ---------------------------------------------------
// Files are written as JSON.stringify(doc, null, 2) + "\n", then placeholders
// are swapped for raw text JSON.stringify cannot produce:
//   RAW(text)        a value placeholder -> `text` verbatim (e.g. 9007199254740993)
//   KV(text) as key  the whole `"@@KVn@@": null` member -> `text` verbatim
//   "@@HASH@@"       -> the hash rulvar computes for the parsed claims
const raws = [];
const RAW = (text) => `@@RAW${raws.push(text) - 1}@@`;
const KV = (text) => `@@KV${raws.push(text) - 1}@@`;
function render(doc, { indent = 2 } = {}) {
  return `${JSON.stringify(doc, null, indent)}\n`
    .replace(/"@@KV(\d+)@@": null/g, (_, i) => raws[i])
    .replace(/"@@RAW(\d+)@@"/g, (_, i) => raws[i]);
}
function withHash(text, hash) {
  if (hash !== undefined) return text.replace('@@HASH@@', hash);
  let computed = '0'.repeat(64);
  try {
    computed = knowledgeHash(JSON.parse(text.replace('@@HASH@@', '0')).claims);
  } catch {
    // not JSON, or claims rulvar cannot hash: leave 64 zeros
  }
  return text.replace('@@HASH@@', computed);
}

const BASE = {
  id: 'nightly-42/openai:gpt-4o-mini@low/extraction',
  subject: { model: 'openai:gpt-4o-mini', effort: 'low' },
  taskClass: 'extraction',
  polarity: 'strength',
  statement: 'sweep passRate 0.93 over 15 extraction cases: at or above the strength band',
  class: 'eval-measured',
  status: 'active',
  evidence: [{ kind: 'eval', reportId: 'nightly-42', caseIds: ['c01', 'c02', 'c03'] }],
  metrics: { passRate: 0.9333333333333333, n: 15, graderId: 'eval-suite', cost: 0.0123 },
  confidence: 'medium',
  observedAt: '2026-07-01T00:00:00.000Z',
  expiresAt: '2026-09-29T00:00:00.000Z',
  modelEpoch: { canaryFingerprint: 'ab'.repeat(32) },
  author: { kind: 'eval-pipeline', id: 'kb' },
};
const EDITORIAL = {
  id: 'human/anthropic:claude-sonnet-4-5/planning',
  subject: { model: 'anthropic:claude-sonnet-4-5' },
  taskClass: 'planning',
  polarity: 'weakness',
  statement: 'loses track of constraints in long plans',
  class: 'human-editorial',
  status: 'active',
  evidence: [{ kind: 'journal', runId: 'run-7', entryRef: 12 }],
  confidence: 'low',
  observedAt: '2026-07-01',
  expiresAt: '2026-08-15T00:00:00.000Z',
  author: { kind: 'human', id: 'alice' },
};
const clone = (x) => structuredClone(x);
// A copy of BASE with a change applied (f mutates the copy).
const claim = (f = () => {}) => { const c = clone(BASE); f(c); return c; };
const docOf = (claims, version = 3) => ({ version, hash: '@@HASH@@', claims });

// ---- the vectors --------------------------------------------------------------
const specs = []; // {name, topic, text? | bytes?, hash?}
const add = (topic, name, doc, opts = {}) =>
  specs.push({ topic, name, text: withHash(render(doc, opts), opts.hash) });
const addText = (topic, name, text) => specs.push({ topic, name, text });

// baseline and (12) missing optional fields
add('baseline', 'valid-eval-claim', docOf([claim()]));
add('baseline', 'valid-empty-claims', docOf([], 0));
add('12', 'optional-fields-absent', docOf([claim((c) => { delete c.subject.effort; delete c.metrics.cost; delete c.modelEpoch; })]));
add('12', 'editorial-claim-no-metrics', docOf([clone(EDITORIAL)]));
add('12', 'all-optional-fields-present', docOf([claim((c) => {
  c.metrics.baseline = { model: 'openai:gpt-4o', passRate: 0.8 };
  c.modelEpoch = { registryVersion: 'r1', pricingVersion: 'p1', capsHash: 'c1', canaryFingerprint: 'f1' };
  c.origin = { kind: 'kb-proposal', runId: 'run-1', entryRef: 4 };
  c.supersedes = 'nightly-41/openai:gpt-4o-mini@low/extraction';
})]));
add('12', 'eval-measured-without-metrics', docOf([claim((c) => { delete c.metrics; })]));
add('12', 'metrics-null', docOf([claim((c) => { c.metrics = null; })]));
add('12', 'modelEpoch-empty-object', docOf([claim((c) => { c.modelEpoch = {}; })]));

// (1) unknown keys in a claim, at top and nested
add('1', 'unknown-key-claim-last', docOf([claim((c) => { c['x-note'] = 'hello'; })]));
add('1', 'unknown-key-claim-first', docOf([{ aaa: { deep: [1, { z: null }] }, ...claim() }]));
add('1', 'unknown-key-subject', docOf([claim((c) => { c.subject = { zz: 1, model: c.subject.model, effort: 'low', aa: true }; })]));
add('1', 'unknown-key-metrics', docOf([claim((c) => { c.metrics.wilson95 = [0.7, 0.99]; })]));
add('1', 'unknown-key-metrics-baseline', docOf([claim((c) => { c.metrics.baseline = { model: 'openai:gpt-4o', passRate: 0.8, extra: 'x' }; })]));
add('1', 'unknown-key-evidence-item', docOf([claim((c) => { c.evidence[0].runner = { host: 'ci-3' }; })]));
add('1', 'unknown-key-modelEpoch', docOf([claim((c) => { c.modelEpoch.tokenizer = 'o200k'; })]));
add('1', 'unknown-key-author', docOf([claim((c) => { c.author.email = 'kb@example.com'; })]));
add('1', 'unknown-key-origin', docOf([claim((c) => { c.origin = { kind: 'kb-proposal', runId: 'run-1', entryRef: 4, note: 'n' }; })]));
add('1', 'unknown-keys-empty-containers', docOf([claim((c) => { c.x = { a: {}, b: [], c: [[]], d: [{}] }; })]));
// JSON.parse puts array-index keys ("0".."4294967294") first, ascending
add('1', 'unknown-keys-integer-like', docOf([claim((c) => {
  c[KV('"b": 1, "10": "ten", "2": "two", "a": 2, "4294967294": "max-index", "4294967295": "not-index", "01": "not-canonical", "-1": "neg"')] = null;
})]));
add('1', 'unknown-key-integer-like-nested', docOf([claim((c) => { c.subject = { model: c.subject.model, [KV('"7": "x", "0": "y"')]: null }; })]));
add('1', 'unknown-key-__proto__', docOf([claim((c) => { c[KV('"__proto__": {"polluted": true}')] = null; })]));
add('1', 'duplicate-key-in-claim', docOf([claim((c) => {
  const { status, ...rest } = c;
  for (const k of Object.keys(c)) delete c[k];
  Object.assign(c, { [KV('"status": "archived"')]: null }, rest, { [KV('"status": "active"')]: null });
})]));
add('1', 'unknown-key-number-forms', docOf([claim((c) => {
  c.x = { one: RAW('1.0'), e2: RAW('1E2'), negzero: RAW('-0'), small: RAW('1e-7'), frac: RAW('0.1e1'), big: RAW('123456789012345678901234567890'), tiny: RAW('5e-324'), under: RAW('1e-400') };
})]));
add('1', 'unknown-key-string-escapes', docOf([claim((c) => { c.x = RAW('"\\u00e9 \\/ \\u001F \\u2028 \\ud83d\\ude00 \\t \\u0041"'); })]));

// (2) unknown top-level keys and top-level order
add('2', 'unknown-top-level-key-last', { version: 3, hash: '@@HASH@@', claims: [claim()], 'x-kb': { schema: 2 } });
add('2', 'unknown-top-level-key-first', { generator: 'kb', version: 3, hash: '@@HASH@@', claims: [claim()] });
add('2', 'top-level-order-claims-first', { claims: [claim()], hash: '@@HASH@@', version: 3 });
add('2', 'duplicate-top-level-claims-key', { version: 3, hash: '@@HASH@@', claims: [], [KV(`"claims": ${JSON.stringify([claim()])}`)]: null });

// (3) strings: lone surrogates and escapes
add('3', 'lone-high-surrogate-statement', docOf([claim((c) => { c.statement = RAW('"bad \\ud800 end"'); })]));
add('3', 'lone-low-surrogate-statement', docOf([claim((c) => { c.statement = RAW('"\\udfff"'); })]));
add('3', 'reversed-surrogate-pair-statement', docOf([claim((c) => { c.statement = RAW('"\\ude00\\ud83d"'); })]));
add('3', 'escaped-valid-pair-statement', docOf([claim((c) => { c.statement = RAW('"smile \\ud83d\\ude00"'); })]));
add('3', 'lone-surrogate-in-id-and-unknown-key', docOf([claim((c) => { c.id = RAW('"id-\\udbff"'); c[KV('"k\\ud800": "v\\udc00"')] = null; })]));
add('3', 'non-ascii-raw-and-escaped', docOf([claim((c) => { c.statement = 'café 東京 😀'; c.taskClass = RAW('"sql\\u2013gen"'); })]));
{
  // raw bytes ED A0 80 (a CESU-8 lone surrogate, not valid UTF-8) in a statement
  const text = withHash(render(docOf([claim((c) => { c.statement = 'bad @@BYTES@@ end'; })])));
  const [before, after] = text.split('@@BYTES@@');
  const bytes = Buffer.concat([Buffer.from(before), Buffer.from([0xed, 0xa0, 0x80]), Buffer.from(after)]);
  // hash of what Node decodes, so only the encoding is under test
  const decoded = bytes.toString('utf8');
  const hash = knowledgeHash(JSON.parse(decoded.replace(/"hash": "[0-9a-f]{64}"/, '"hash": "0"')).claims);
  const fixed = Buffer.from(bytes.toString('latin1').replace(/"hash": "[0-9a-f]{64}"/, `"hash": "${hash}"`), 'latin1');
  specs.push({ topic: '3', name: 'raw-invalid-utf8-bytes-statement', bytes: fixed });
}
addText('3', 'utf8-bom-prefix', `\ufeff${withHash(render(docOf([claim()])))}`);

// (4) big numbers
add('4', 'n-beyond-2^53-hash-of-parsed', docOf([claim((c) => { c.metrics.n = RAW('9007199254740993'); })]));
{
  // same file, but hashed over the exact digits (what an arbitrary-precision
  // JCS would give): rulvar hashes the parsed double, so this is refused
  const text = render(docOf([claim((c) => { c.metrics.n = RAW('9007199254740993'); })]));
  const parsedClaims = JSON.parse(text.replace('@@HASH@@', '0')).claims;
  const exactJcs = jcsOf(parsedClaims).replace('"n":9007199254740992', '"n":9007199254740993');
  const hash = createHash('sha256').update(exactJcs, 'utf8').digest('hex');
  specs.push({ topic: '4', name: 'n-beyond-2^53-hash-of-exact-digits', text: text.replace('@@HASH@@', hash) });
}
add('4', 'huge-integer-in-unknown-key', docOf([claim((c) => { c.x = RAW('123456789012345678901234567890'); })]));
add('4', 'huge-integer-origin-entryRef', docOf([claim((c) => { c.origin = { kind: 'kb-proposal', runId: 'r', entryRef: RAW('18446744073709551617') }; })]));
add('4', 'huge-integer-cost', docOf([claim((c) => { c.metrics.cost = RAW('100000000000000000000000'); })]));
add('4', 'version-beyond-2^53', docOf([claim()], RAW('9007199254740993')));
add('4', 'version-2^53', docOf([claim()], RAW('9007199254740992')));
add('4', 'version-1e400', docOf([claim()], RAW('1e400')));
add('4', 'passRate-1e400', docOf([claim((c) => { c.metrics.passRate = RAW('1e400'); })]));
add('4', 'version-3.0', docOf([claim()], RAW('3.0')));
add('4', 'version-1E2', docOf([claim()], RAW('1E2')));
add('4', 'version-negative-zero', docOf([claim()], RAW('-0')));
add('4', 'version-negative', docOf([claim()], -1));
add('4', 'version-fraction', docOf([claim()], 1.5));
add('4', 'version-string', docOf([claim()], '3'));
add('4', 'number-forms-in-metrics', docOf([claim((c) => { c.metrics.passRate = RAW('0.90'); c.metrics.n = RAW('15.0'); c.metrics.cost = RAW('1.23e-2'); })]));

// (5) instants: each string as observedAt, then as expiresAt
const INSTANTS = [
  '2026-07-01T00:00:00+0200', '2026-07-01T00:00:00+02:00', '2026-07-01T00:00:00-05:30',
  '2026-07-01t00:00:00z', '2026-07-01T00:00:00z', '2026-07-01t00:00:00Z',
  ...Array.from({ length: 12 }, (_, d) => `2026-07-01T00:00:00.${'123456789012'.slice(0, d + 1)}Z`),
  '2026-07-01T00:00:00.0159999999Z', '2026-07-01T00:00:00.015999Z', '2026-07-01T00:00:00.0012345678Z',
  '2026-07-01T00:00:00.9999Z', '2026-07-01T00:00:00.5+0530',
  '2026-07-01', '2026-07', '2026', '2026-07-01T00:00:00', '2026-07-01T00:00', '2026-07-01 00:00:00Z',
  '2026-07-01T24:00:00Z', '2026-02-30', '2026-02-31T00:00:00Z', '+002026-07-01T00:00:00Z',
  'Wed, 01 Jul 2026 00:00:00 GMT', 'July 1, 2026', '1',
  '2026-07-01T00:00:60Z', '2026-13-01', '2026-07-01T00:00:00.000+02', '2026-07-01T00:00:00.Z',
  '2026-07-01T00:00:00.000Z ', 'garbage', '',
];
for (const s of INSTANTS) {
  add('5', `observedAt ${JSON.stringify(s)}`, docOf([claim((c) => { c.observedAt = s; c.expiresAt = '2030-01-01T00:00:00.000Z'; })]));
  add('5', `expiresAt ${JSON.stringify(s)}`, docOf([claim((c) => { c.expiresAt = s; })]));
}
add('5', 'expiresAt-before-observedAt', docOf([claim((c) => { c.expiresAt = '2020-01-01T00:00:00.000Z'; })]));
add('5', 'observedAt-number', docOf([claim((c) => { c.observedAt = 1782864000000; })]));

// (6) metrics values out of range
add('6', 'passRate-above-1', docOf([claim((c) => { c.metrics.passRate = 1.5; })]));
add('6', 'passRate-below-0', docOf([claim((c) => { c.metrics.passRate = -0.5; })]));
add('6', 'n-negative', docOf([claim((c) => { c.metrics.n = -3; })]));
add('6', 'n-fractional', docOf([claim((c) => { c.metrics.n = 2.5; })]));
add('6', 'n-zero', docOf([claim((c) => { c.metrics.n = 0; })]));
add('6', 'passRate-string', docOf([claim((c) => { c.metrics.passRate = '0.9'; })]));
add('6', 'graderId-empty', docOf([claim((c) => { c.metrics.graderId = ''; })]));

// (7) empty and odd identifiers
add('7', 'effort-empty', docOf([claim((c) => { c.subject.effort = ''; })]));
add('7', 'effort-number', docOf([claim((c) => { c.subject.effort = 3; })]));
add('7', 'reportId-empty', docOf([claim((c) => { c.evidence[0].reportId = ''; })]));
for (const model of [':', 'openai:', ':gpt', 'gpt', '', 'a:b:c']) {
  add('7', `model ${JSON.stringify(model)}`, docOf([claim((c) => { c.subject.model = model; })]));
}
add('7', 'model-number', docOf([claim((c) => { c.subject.model = 5; })]));
add('7', 'subject-missing', docOf([claim((c) => { delete c.subject; })]));
add('7', 'subject-array', docOf([claim((c) => { c.subject = ['openai:gpt-4o-mini']; })]));
add('7', 'id-empty', docOf([claim((c) => { c.id = ''; })]));
add('7', 'taskClass-empty', docOf([claim((c) => { c.taskClass = ''; })]));
add('7', 'author-id-empty', docOf([claim((c) => { c.author.id = ''; })]));

// (8) statement length
add('8', 'statement-201-chars', docOf([claim((c) => { c.statement = 'x'.repeat(201); })]));
add('8', 'statement-1000-chars', docOf([claim((c) => { c.statement = 'y'.repeat(1000); })]));
add('8', 'statement-150-astral-chars', docOf([claim((c) => { c.statement = '😀'.repeat(150); })]));
add('8', 'statement-empty', docOf([claim((c) => { c.statement = ''; })]));

// (9) duplicate ids
add('9', 'duplicate-claim-ids', docOf([claim(), claim((c) => { c.polarity = 'weakness'; })]));

// (10) enums
add('10', 'status-outside-enum', docOf([claim((c) => { c.status = 'retired'; })]));
add('10', 'polarity-outside-enum', docOf([claim((c) => { c.polarity = 'neutral'; })]));
add('10', 'class-outside-enum', docOf([claim((c) => { c.class = 'measured'; })]));
add('10', 'confidence-outside-enum', docOf([claim((c) => { c.confidence = 'very-high'; })]));
add('10', 'author-kind-outside-enum', docOf([claim((c) => { c.author.kind = 'bot'; })]));
add('10', 'evidence-kind-outside-enum', docOf([claim((c) => { c.evidence = [{ kind: 'rumour' }]; })]));
add('10', 'evidence-items-not-objects', docOf([claim((c) => { c.evidence = [1, 'x', null]; })]));
add('10', 'evidence-empty', docOf([claim((c) => { c.evidence = []; })]));
add('10', 'many-issues-two-claims', docOf([claim(), { id: '', subject: null, polarity: 'up', status: 'x', evidence: {}, author: { kind: 'bot' } }]));
add('10', 'claim-null', docOf([null]));
add('10', 'status-superseded-archived-stale', docOf(['superseded', 'archived', 'stale'].map((s, i) => claim((c) => { c.id = `c${i}`; c.status = s; }))));

// (11) hash
add('11', 'hash-mismatch', docOf([claim()]), { hash: createHash('sha256').update('x').digest('hex') });
{
  const good = withHash(render(docOf([claim()])));
  addText('11', 'hash-mismatch-statement-edited', good.replace('0.93 over', '0.94 over'));
  addText('11', 'hash-uppercase', good.replace(/"hash": "([0-9a-f]{64})"/, (_, h) => `"hash": "${h.toUpperCase()}"`));
  addText('11', 'hash-prefixed', good.replace(/"hash": "([0-9a-f]{64})"/, (_, h) => `"hash": "sha256:${h}"`));
  addText('11', 'hash-missing', good.replace(/ {2}"hash": "[0-9a-f]{64}",\n/, ''));
}

// not a snapshot at all, and formatting
for (const [name, text] of [
  ['empty-file', ''], ['not-json', '{'], ['trailing-comma', '{"version":0,"hash":"x","claims":[],}'],
  ['top-level-null', 'null'], ['top-level-array', '[]'], ['claims-not-array', `{"version":0,"hash":"${'0'.repeat(64)}","claims":{}}`],
  ['trailing-garbage', `${withHash(render(docOf([], 0)))}x`],
]) addText('format', name, text);
add('format', 'compact-one-line', docOf([claim()]), { indent: 0 });
add('format', 'tab-indented', docOf([claim()]), { indent: '\t' });
addText('format', 'crlf-line-ends', withHash(render(docOf([claim()]))).replace(/\n/g, '\r\n'));
addText('format', 'no-trailing-newline', withHash(render(docOf([claim()]))).slice(0, -1));
add('format', 'nine-active-claims-one-pair', docOf(Array.from({ length: 9 }, (_, i) => claim((c) => { c.id = `k${i}`; }))));

// A plain RFC 8785 serializer for JSON.parse output, used only to build the
// exact-digits hash above; checked against rulvar's knowledgeHash below.
function jcsOf(value) {
  if (value === null || typeof value !== 'object') return JSON.stringify(value);
  if (Array.isArray(value)) return `[${value.map(jcsOf).join(',')}]`;
  return `{${Object.keys(value).sort().filter((k) => value[k] !== undefined).map((k) => `${JSON.stringify(k)}:${jcsOf(value[k])}`).join(',')}}`;
}

// ---- running rulvar -------------------------------------------------------------
const parseMs = (s) => (typeof s === 'string' && !Number.isNaN(Date.parse(s)) ? Date.parse(s) : null);
function parseIn(tz, s) {
  process.env.TZ = tz;
  try { return parseMs(s); } finally { process.env.TZ = 'UTC'; }
}
function instantsOf(text) {
  let first;
  try { first = JSON.parse(text).claims[0]; } catch { return undefined; }
  if (first === null || typeof first !== 'object') return undefined;
  const out = { observedAtMs: parseMs(first.observedAt), expiresAtMs: parseMs(first.expiresAt) };
  const tz = 'Asia/Kolkata';
  const local = { tz, observedAtMs: parseIn(tz, first.observedAt), expiresAtMs: parseIn(tz, first.expiresAt) };
  if (local.observedAtMs !== out.observedAtMs || local.expiresAtMs !== out.expiresAtMs) out.localTime = local;
  return out;
}

const dir = mkdtempSync(join(tmpdir(), 'rulvar-reader-vec-'));
const path = join(dir, 'rulvar.models.json');
const scrub = (message) => message.split(path).join('rulvar.models.json');
const vectors = [];
// sanity: our jcsOf agrees with rulvar's knowledgeHash on the base claim
if (createHash('sha256').update(jcsOf([BASE])).digest('hex') !== knowledgeHash([BASE])) throw new Error('jcsOf drifted');
for (const spec of specs) {
  const bytes = spec.bytes ?? Buffer.from(spec.text, 'utf8');
  writeFileSync(path, bytes);
  const file = bytes.toString('utf8');
  const vector = { name: spec.name, topic: spec.topic, file };
  if (spec.bytes) vector.fileBase64 = bytes.toString('base64');
  const store = new FileModelKnowledgeStore({ path });
  try {
    const snapshot = await store.current();
    vector.accepted = true;
    vector.read = { version: snapshot.version, hash: snapshot.hash, claims: snapshot.claims.length };
    try {
      await store.commit([], snapshot.version);
      vector.rerendered = readFileSync(path, 'utf8');
    } catch (error) {
      vector.rerenderError = scrub(error.message);
    }
  } catch (error) {
    vector.accepted = false;
    vector.error = scrub(error.message);
    vector.errorType = error.name;
  }
  const instants = instantsOf(file);
  if (instants) vector.instants = instants;
  vectors.push(vector);
}
rmSync(dir, { recursive: true, force: true });
writeFileSync(join(DATA, 'rulvar_reader_vectors.json'), `${JSON.stringify(vectors, null, 1)}\n`);

// How V8 reads instant strings (TZ=UTC, plus two other zones for local-time forms).
const instantTable = INSTANTS.map((text) => ({
  text,
  ms: parseMs(text),
  msAsiaKolkata: parseIn('Asia/Kolkata', text),
  msAmericaNewYork: parseIn('America/New_York', text),
}));
writeFileSync(join(DATA, 'v8_instant_vectors.json'), `${JSON.stringify({ node: process.version, instants: instantTable }, null, 1)}\n`);

const accepted = vectors.filter((v) => v.accepted).length;
console.log(`wrote ${vectors.length} reader vectors (${accepted} accepted) and ${instantTable.length} instants`);
