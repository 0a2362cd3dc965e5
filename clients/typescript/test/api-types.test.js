// The client's types come from the OpenAPI document the server serves; these
// tests fail when the two drift apart.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { cpSync, existsSync, mkdtempSync, readFileSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import { execFileSync } from 'node:child_process';
import { homedir, tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { generate, openapiPath, outputPath } from '../scripts/generate-api-types.js';
import { Toolgate } from '../src/index.js';

const src = fileURLToPath(new URL('../src/', import.meta.url));
const doc = JSON.parse(readFileSync(openapiPath, 'utf8'));

test('src/api.d.ts is what the OpenAPI document generates (run `npm run generate`)', () => {
  assert.equal(readFileSync(outputPath, 'utf8'), generate(doc));
});

// Every operation of the document, and the method that sends it. The codec
// routes are the temporal CLI's and the Web UI's, not an agent's or an
// approver's, and the document itself is no call.
const methods = {
  'GET /v1/tools': 'tools',
  'POST /v1/calls': 'submit',
  'GET /v1/calls': 'calls',
  'GET /v1/calls/{call_id}': 'status',
  'GET /v1/pending': 'pending',
  'POST /v1/calls/{call_id}/decision': 'decide',
  'POST /v1/calls/{call_id}/passkey-challenge': 'passkeyChallenge',
  'POST /v1/calls/{call_id}/cancel': 'cancel',
  'POST /v1/calls/{call_id}/user-decision': 'userDecision',
  'POST /v1/decisions': 'decideAll',
  'GET /v1/sessions/{session}': 'session',
  'DELETE /v1/sessions/{session}/sticky/{tool}': 'revokeSticky',
  'POST /v1/sessions/{session}/end': 'endSession',
  'POST /v1/calls/{call_id}/claim': 'claim',
  'POST /v1/calls/{call_id}/report': 'report',
  'POST /v1/calls/{call_id}/ran-after-end': 'ranAfterEnd',
  'GET /v1/audit/checkpoint': 'auditCheckpoint',
  'GET /v1/audit/key': 'auditKey',
  'GET /v1/audit/entries': 'auditEntries',
  'GET /v1/audit/proof': 'auditProof',
  'GET /v1/audit/calls/{call_id}': 'receipt',
};
const notForTheClient = ['GET /v1/openapi.json', 'POST /codec/{namespace}/decode', 'POST /codec/{namespace}/encode'];

test('every operation of the OpenAPI document has a client method', () => {
  const operations = Object.entries(doc.paths).flatMap(([path, item]) =>
    Object.keys(item).filter((m) => m !== 'parameters').map((m) => `${m.toUpperCase()} ${path}`));
  for (const op of operations) {
    if (notForTheClient.includes(op)) continue;
    assert.ok(methods[op], `${op} has no client method`);
    assert.equal(typeof Toolgate.prototype[methods[op]], 'function', `${op}: Toolgate.${methods[op]} is missing`);
  }
  for (const op of Object.keys(methods)) assert.ok(operations.includes(op), `${op} is not in the document any more`);
});

// tsc checks the declarations, and a program that uses them, against the
// generated types: a field renamed in the document breaks this compile.
// The compiler and the frameworks' types come from the package's own
// node_modules after `npm install` (its devDependencies), else from the
// npm cache scripts/test fills (TOOLGATE_NPM_DIR), which does not install
// into clients/typescript.
function typeCheckModules(pkg = fileURLToPath(new URL('../', import.meta.url)), env = process.env) {
  const own = join(pkg, 'node_modules');
  const npm = env.TOOLGATE_NPM_DIR || join(env.XDG_CACHE_HOME || join(homedir(), '.cache'), 'toolgate', 'npm');
  for (const modules of [own, join(npm, 'node_modules')]) {
    if (existsSync(join(modules, '.bin', 'tsc'))) return { modules, tsc: join(modules, '.bin', 'tsc') };
  }
  throw new Error(`no TypeScript compiler in ${own} or ${join(npm, 'node_modules')}: run \`npm install\` in ${pkg} (TypeScript and the frameworks' types are its devDependencies)`);
}

test('without an install, the type check says to run npm install', () => {
  const empty = mkdtempSync(join(tmpdir(), 'toolgate-empty-'));
  try {
    assert.throws(() => typeCheckModules(empty, { TOOLGATE_NPM_DIR: empty }), /no TypeScript compiler in .*run `npm install` in/);
  } finally {
    rmSync(empty, { recursive: true, force: true });
  }
});

test('the declarations type-check with TypeScript', () => {
  const { modules, tsc } = typeCheckModules();
  // tsc runs over a copy of the package beside a node_modules holding the
  // frameworks, so that the adapters' framework imports resolve the way
  // they do in an app (from the nearest node_modules) and
  // '@toolgate/client' resolves to the package itself.
  const dir = mkdtempSync(join(tmpdir(), 'toolgate-tsc-'));
  cpSync(fileURLToPath(new URL('../package.json', import.meta.url)), join(dir, 'package.json'));
  cpSync(src, join(dir, 'src'), { recursive: true });
  for (const f of ['usage.ts', 'usage-frameworks.ts']) cpSync(fileURLToPath(new URL(f, import.meta.url)), join(dir, 'test', f));
  symlinkSync(modules, join(dir, 'node_modules'));
  const project = join(dir, 'tsconfig.json');
  writeFileSync(project, JSON.stringify({
    compilerOptions: {
      strict: true, noEmit: true, target: 'es2022', module: 'nodenext', moduleResolution: 'nodenext',
      // skipLibCheck as in an app: some frameworks' declarations do not
      // check against every @types/node; ours are proven through usage.
      lib: ['es2022', 'dom'], types: ['node'], skipLibCheck: true,
    },
    files: ['test/usage.ts', 'test/usage-frameworks.ts'],
  }));
  try {
    execFileSync(tsc, ['-p', project], { encoding: 'utf8' });
  } catch (err) {
    assert.fail(`tsc found type errors:\n${err.stdout}${err.stderr}`);
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});
