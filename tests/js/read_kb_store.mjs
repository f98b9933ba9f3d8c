// Makes tests/data/rulvar_reads_kb_store.json: rulvar's own reader and writer
// given a store kb wrote (tests/data/kb_manifest_store.json, four nights of
// one epoch, so its claim cites an epoch manifest: SPEC 14.3).
//
// What it uses from rulvar, from packages/core/dist/index.js:
//   FileModelKnowledgeStore.current()    the reader (structure and hash check)
//   FileModelKnowledgeStore.commit([], v) the writer, given no ops
//   knowledgeHash                         sha256 of the claims' JCS
//
// Run with Node 20 on a rulvar checkout whose packages/core is built
// (tests/js/RULVAR.md):
//   RULVAR_DIR=/tmp/rulvar node tests/js/read_kb_store.mjs
import { copyFileSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';

const RULVAR_DIR = resolve(process.argv[2] ?? process.env.RULVAR_DIR ?? '');
if (!process.argv[2] && !process.env.RULVAR_DIR) {
  console.error('usage: RULVAR_DIR=/path/to/rulvar node read_kb_store.mjs');
  process.exit(2);
}
const core = await import(pathToFileURL(join(RULVAR_DIR, 'packages/core/dist/index.js')).href);
const { FileModelKnowledgeStore, knowledgeHash } = core;
const DATA = join(dirname(fileURLToPath(import.meta.url)), '..', 'data');
const input = join(DATA, 'kb_manifest_store.json');

const dir = mkdtempSync(join(tmpdir(), 'rulvar-reads-kb-'));
const path = join(dir, 'rulvar.models.json');
copyFileSync(input, path);
const store = new FileModelKnowledgeStore({ path });
const read = await store.current();
const out = {
  input: 'kb_manifest_store.json',
  accepted: true,
  version: read.version,
  hash: read.hash,
  recomputedHash: knowledgeHash(read.claims),
  claims: read.claims.map((c) => ({ id: c.id, status: c.status, evidence: c.evidence })),
};
await store.commit([], read.version);
const rewritten = JSON.parse(readFileSync(path, 'utf8'));
out.rewrittenVersion = rewritten.version;
out.rewrittenHash = rewritten.hash;
rmSync(dir, { recursive: true, force: true });
writeFileSync(join(DATA, 'rulvar_reads_kb_store.json'), `${JSON.stringify(out, null, 2)}\n`);
console.log(`rulvar read ${out.claims.length} claims, version ${out.version}`);
