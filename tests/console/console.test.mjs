// The web console against a real broker (`tessera serve --dev`) in Debian's
// Chromium: an approver approves a deploy an agent's run asked for while a
// waiting client long-polls, an admin ends the run and reads the audit log.
// No mocks: every answer comes from the broker binary in TESSERA_BIN.
//
//   scripts/console-test.sh install && scripts/console-test.sh run target/debug/tessera
//
// Screenshots of every open page go to tests/console/artifacts/ when a test
// fails; with CONSOLE_SCREENSHOTS=DIR, named screenshots of each page are
// saved into DIR for the docs (docs/console/*.png).

import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import fs from 'node:fs';
import net from 'node:net';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { chromium } from 'playwright-core';

const HERE = path.dirname(fileURLToPath(import.meta.url));
const REPO = path.resolve(HERE, '../..');
const ARTIFACTS = path.join(HERE, 'artifacts');
const CHROMIUM = '/usr/bin/chromium';
const BIN = process.env.TESSERA_BIN ? path.resolve(process.env.TESSERA_BIN) : null;
const SHOTS = process.env.CONSOLE_SCREENSHOTS ? path.resolve(process.env.CONSOLE_SCREENSHOTS) : null;
const CI = process.env.CI === 'true';
const VIEWPORT = { width: 1280, height: 860 };

// Without Chromium the tests are skipped on a developer's machine, and fail in CI.
let skip = false;
if (!fs.existsSync(CHROMIUM)) {
  if (CI) throw new Error(`${CHROMIUM} is missing (CI=true: not skipping); run scripts/console-test.sh install`);
  skip = `${CHROMIUM} is missing: scripts/console-test.sh install (as root) installs Debian's chromium`;
}

// ---------------------------------------------------------------- the broker

let dir; // the temp dir D
let broker; // the child process
let brokerLog = '';
let base; // http://127.0.0.1:PORT
let adminToken;
let browser;
const pages = new Map(); // name -> page, for failure screenshots

function freePort() {
  return new Promise((resolve, reject) => {
    const srv = net.createServer();
    srv.unref();
    srv.on('error', reject);
    srv.listen(0, '127.0.0.1', () => {
      const { port } = srv.address();
      srv.close(() => resolve(port));
    });
  });
}

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

/** The promise's value, or a failure after ms (the timer is cleared either way). */
async function within(ms, promise, what) {
  let timer;
  const timeout = new Promise((_, reject) => {
    timer = setTimeout(() => reject(new Error(`${what}: no answer within ${ms} ms`)), ms);
  });
  try {
    return await Promise.race([promise, timeout]);
  } finally {
    clearTimeout(timer);
  }
}

/** One HTTP call to the broker: {status, body, headers}. */
async function call(method, urlPath, { bearer, body } = {}) {
  const headers = { accept: 'application/json' };
  if (bearer) headers.authorization = `Bearer ${bearer}`;
  if (body !== undefined) headers['content-type'] = 'application/json';
  const res = await fetch(base + urlPath, { method, headers, body: body === undefined ? undefined : JSON.stringify(body) });
  const text = await res.text();
  let parsed = null;
  try {
    parsed = text ? JSON.parse(text) : null;
  } catch {
    parsed = text;
  }
  return { status: res.status, body: parsed, headers: res.headers };
}

/** call() that must answer `status`; returns the body. */
async function must(status, method, urlPath, opts) {
  const r = await call(method, urlPath, opts);
  assert.equal(r.status, status, `${method} ${urlPath}: expected ${status}, got ${r.status} ${JSON.stringify(r.body)}`);
  return r.body;
}

before(async () => {
  if (skip) return;
  assert.ok(BIN, 'TESSERA_BIN must name the tessera binary (scripts/console-test.sh run BIN)');
  assert.ok(fs.existsSync(BIN), `no tessera binary at ${BIN}`);
  dir = fs.mkdtempSync(path.join(fs.existsSync('/var/tmp') ? '/var/tmp' : REPO, 'console-test-'));
  const port = await freePort();
  base = `http://127.0.0.1:${port}`;
  // Only this test's settings: none of the caller's TESSERA_* variables.
  const env = Object.fromEntries(Object.entries(process.env).filter(([k]) => !k.startsWith('TESSERA_')));
  env.TESSERA_LISTEN = `127.0.0.1:${port}`;
  // cwd D has no policy/: dev mode runs the example policy built into the binary.
  broker = spawn(BIN, ['serve', '--dev', '--data-dir', path.join(dir, 'data')], { cwd: dir, env, stdio: ['ignore', 'pipe', 'pipe'] });
  const keep = (chunk) => {
    brokerLog += chunk;
    if (brokerLog.length > 200_000) brokerLog = brokerLog.slice(-100_000);
  };
  broker.stdout.on('data', keep);
  broker.stderr.on('data', keep);
  const exited = new Promise((resolve) => broker.once('exit', (code, signal) => resolve({ code, signal })));

  const deadline = Date.now() + 60_000;
  for (;;) {
    const state = await Promise.race([exited, sleep(0)]);
    if (state) throw new Error(`the broker exited (${JSON.stringify(state)}):\n${brokerLog}`);
    try {
      const r = await fetch(`${base}/readyz`);
      if (r.status === 200) break;
    } catch {
      // not listening yet
    }
    if (Date.now() > deadline) throw new Error(`the broker was not ready within 60 s:\n${brokerLog}`);
    await sleep(100);
  }
  adminToken = fs.readFileSync(path.join(dir, 'data', 'admin.token'), 'utf8').trim();
  assert.match(adminToken, /^tsr_adm_/);

  browser = await chromium.launch({
    executablePath: CHROMIUM,
    args: ['--headless', '--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run', '--disable-background-networking', '--disable-component-update', '--disable-sync'],
  });
});

after(async () => {
  await browser?.close().catch(() => {});
  if (broker && broker.exitCode === null && broker.signalCode === null) {
    const gone = new Promise((resolve) => broker.once('exit', resolve));
    broker.kill('SIGTERM');
    const t = setTimeout(() => broker.kill('SIGKILL'), 10_000);
    await gone;
    clearTimeout(t);
  }
  if (dir) fs.rmSync(dir, { recursive: true, force: true });
});

// ---------------------------------------------------------------- helpers

/** A test whose failure saves a screenshot of every open page and prints the broker's log tail. */
function step(name, fn) {
  test(name, { skip, timeout: 180_000 }, async (t) => {
    try {
      await fn(t);
    } catch (e) {
      fs.mkdirSync(ARTIFACTS, { recursive: true });
      const slug = name.replace(/[^a-z0-9]+/gi, '-').replace(/^-|-$/g, '').toLowerCase();
      for (const [pageName, page] of pages) {
        if (page.isClosed()) continue;
        const file = path.join(ARTIFACTS, `${slug}--${pageName}.png`);
        try {
          await page.screenshot({ path: file, fullPage: true });
          console.error(`console test: screenshot of page ${pageName} (${page.url()}): ${file}`);
        } catch (err) {
          console.error(`console test: no screenshot of ${pageName}: ${err.message}`);
        }
      }
      console.error(`console test: the broker's last log lines:\n${brokerLog.split('\n').slice(-40).join('\n')}`);
      throw e;
    }
  });
}

/** A fresh browser context (own storage) and page, watched for CSP violations, script errors and dialogs. */
async function openPage(name) {
  const context = await browser.newContext({ viewport: VIEWPORT });
  const page = await context.newPage();
  page.problems = [];
  page.on('console', (msg) => {
    if (/Content Security Policy|Refused to (execute|apply|load|connect)/i.test(msg.text())) page.problems.push(`CSP: ${msg.text()}`);
  });
  page.on('pageerror', (err) => page.problems.push(`script error: ${err.message}`));
  page.on('dialog', (dialog) => {
    page.problems.push(`dialog opened: ${dialog.type()} ${dialog.message()}`);
    dialog.dismiss().catch(() => {});
  });
  pages.set(name, page);
  return { context, page };
}

function noProblems(page) {
  assert.deepEqual(page.problems, [], 'no CSP violation, script error or dialog on the page');
}

async function shot(page, name) {
  if (!SHOTS) return;
  fs.mkdirSync(SHOTS, { recursive: true });
  const file = path.join(SHOTS, `${name}.png`);
  if (typeof page.page === 'function') {
    // A locator: just that element.
    await page.screenshot({ path: file });
    console.error(`console test: docs screenshot ${file}`);
    return;
  }
  // The whole page in a window as tall as it (so the status bar sits at its foot).
  const height = await page.evaluate(() => document.documentElement.scrollHeight);
  await page.setViewportSize({ width: VIEWPORT.width, height: Math.max(VIEWPORT.height, Math.min(height, 4000)) });
  await page.screenshot({ path: file });
  await page.setViewportSize(VIEWPORT);
  console.error(`console test: docs screenshot ${file}`);
}

/** Waits until the locator's text contains `text` (string or RegExp). */
async function waitForText(locator, text, timeout = 15_000) {
  const deadline = Date.now() + timeout;
  let last = '';
  for (;;) {
    last = (await locator.innerText({ timeout }).catch(() => '')) ?? '';
    if (typeof text === 'string' ? last.includes(text) : text.test(last)) return last;
    if (Date.now() > deadline) assert.fail(`timed out waiting for ${text} in ${JSON.stringify(last.slice(0, 2000))}`);
    await sleep(100);
  }
}

async function signIn(page, key) {
  await page.goto(`${base}/console`);
  await page.getByRole('heading', { name: 'Sign in', level: 1 }).waitFor();
  // By keyboard: the field has the focus, Enter submits.
  await page.keyboard.type(key);
  await page.keyboard.press('Enter');
  await page.getByRole('heading', { name: 'Approvals', level: 1 }).waitFor();
}

/** What the tab keeps: the session's and the local storage's values, and document.cookie. */
function storage(page) {
  return page.evaluate(() => ({
    session: Object.keys(sessionStorage).map((k) => sessionStorage.getItem(k)),
    local: Object.keys(localStorage).map((k) => localStorage.getItem(k)),
    cookie: document.cookie,
  }));
}

// ---------------------------------------------------------------- the story

const DEPLOY = {
  action: 'invoke',
  resource: 'deployer:prod/web',
  arguments: { service: 'web', commit: '4f2a9c1', environment: 'staging' },
};
const HOSTILE = {
  action: 'invoke',
  resource: 'deployer:prod/api',
  // The example schema types invoke's arguments as {service, commit, environment}:
  // the markup rides in the strings it allows.
  arguments: {
    service: '<img src=x onerror=alert(1)>',
    commit: '<script>alert(2)</script>',
    // U+202E (right-to-left override) would make "prod" read backwards.
    environment: 'staging\u202Edorp',
  },
};

const s = {}; // what the steps hand on

step('the console and its assets are served with the strict CSP', async () => {
  const r = await fetch(`${base}/console`);
  assert.equal(r.status, 200);
  assert.match(r.headers.get('content-type') ?? '', /^text\/html/);
  const csp = r.headers.get('content-security-policy') ?? '';
  for (const directive of [
    "default-src 'none'",
    "script-src 'self'",
    "style-src 'self'",
    "connect-src 'self'",
    "img-src 'self'",
    "base-uri 'none'",
    "form-action 'none'",
    "frame-ancestors 'none'",
  ]) {
    assert.ok(csp.includes(directive), `CSP has ${directive}: ${csp}`);
  }
  const html = await r.text();
  assert.doesNotMatch(html, /<script(?![^>]*\bsrc=)[^>]*>/i, 'no inline script');
  assert.doesNotMatch(html, /<style|\sstyle=/i, 'no inline style');
  // Every file of broker/console is served at /console/<name>, with its type.
  for (const name of fs.readdirSync(path.join(REPO, 'broker/console'))) {
    if (name === 'index.html') continue;
    const a = await fetch(`${base}/console/${name}`);
    assert.equal(a.status, 200, `/console/${name}`);
    const type = a.headers.get('content-type') ?? '';
    if (name.endsWith('.js')) assert.match(type, /javascript/, `/console/${name} content-type`);
    if (name.endsWith('.css')) assert.match(type, /^text\/css/, `/console/${name} content-type`);
    assert.equal(await a.text(), fs.readFileSync(path.join(REPO, 'broker/console', name), 'utf8'), `/console/${name} is the file in the repo`);
  }
});

step('setup by API: a runtime, a run for bob, an approver key for dana, a deploy that needs approval', async () => {
  const runtime = await must(201, 'POST', '/v1/admin/runtimes', { bearer: adminToken, body: { name: 'rt1', users: '*', task_kinds: '*' } });
  assert.match(runtime.key, /^tsr_rt_/);
  const run = await must(201, 'POST', '/v1/runs', {
    bearer: runtime.key,
    body: { user: 'bob', task: { id: 'deploy-web-42', kind: 'deploy' }, ttl: '1h' },
  });
  assert.match(run.run_token, /^tsr_run_/);
  s.runId = run.run_id;
  s.runToken = run.run_token;

  const dana = await must(201, 'POST', '/v1/admin/approvers', { bearer: adminToken, body: { name: 'dana-laptop', user: 'dana' } });
  assert.match(dana.key, /^tsr_apr_/);
  assert.equal(dana.user, 'dana');
  s.danaKey = dana.key;
  const listed = await must(200, 'GET', '/v1/admin/approvers', { bearer: adminToken });
  assert.ok(listed.approvers.some((a) => a.name === 'dana-laptop' && a.user === 'dana' && !('key' in a)));

  const pending = await must(202, 'POST', '/v1/capabilities', { bearer: s.runToken, body: DEPLOY });
  assert.equal(pending.status, 'pending');
  assert.match(pending.approval_id, /^[0-9a-f-]{36}$/);
  assert.match(pending.args, /^[0-9a-f]{64}$/);
  assert.deepEqual(pending.approvers, [{ rule: 'group:release-managers', required: 1 }]);
  s.approval = pending;

  // The same request while it is pending is the same approval.
  const again = await must(202, 'POST', '/v1/capabilities', { bearer: s.runToken, body: DEPLOY });
  assert.equal(again.approval_id, pending.approval_id);
  assert.equal(again.args, pending.args);

  // The agent's side: long-poll until decided, then ask again with the approval id.
  s.waiting = (async () => {
    const deadline = Date.now() + 150_000;
    let approval;
    for (;;) {
      approval = await must(200, 'GET', `/v1/approvals/${pending.approval_id}?wait=30s`, { bearer: s.runToken });
      if (approval.status !== 'pending') break;
      if (Date.now() > deadline) throw new Error('the approval stayed pending');
    }
    if (approval.status !== 'approved') return { approval };
    const issued = await call('POST', '/v1/capabilities', { bearer: s.runToken, body: { ...DEPLOY, approval_id: pending.approval_id } });
    return { approval, issued };
  })();
  s.waiting.catch(() => {}); // awaited in the next step
});

step('an approver signs in, reads the arguments and approves; the waiting client gets the capability', async () => {
  const { context, page } = await openPage('approver');
  s.approverPage = page;
  await page.goto(`${base}/console`);
  await page.getByRole('heading', { name: 'Sign in', level: 1 }).waitFor();
  await shot(page, 'sign-in');
  await page.getByLabel('Key').fill(s.danaKey);
  await page.getByRole('button', { name: 'Sign in' }).click();
  await page.getByRole('heading', { name: 'Approvals', level: 1 }).waitFor();

  // The key is in this tab's sessionStorage only: not in localStorage, no cookie.
  const kept = await storage(page);
  assert.deepEqual(kept.session, [s.danaKey]);
  assert.deepEqual(kept.local, []);
  assert.equal(kept.cookie, '');
  assert.deepEqual(await context.cookies(), []);

  // Only Approvals in the nav for an approver key.
  const nav = await page.getByRole('navigation').getByRole('link').allInnerTexts();
  assert.deepEqual(nav, ['Approvals']);

  const card = page.locator(`article[data-approval-id="${s.approval.approval_id}"]`);
  await card.waitFor();
  const args = await card.locator('pre').innerText();
  assert.ok(args.includes('4f2a9c1'), 'the commit is shown');
  assert.deepEqual(JSON.parse(args), DEPLOY.arguments, 'the full arguments, as JSON');
  const text = await card.innerText();
  for (const expected of [s.approval.args, 'group:release-managers', 'bob', 'deploy-web-42', 'deploy', 'rt1', 'invoke', 'deployer:prod/web', s.runId]) {
    assert.ok(text.includes(expected), `the card shows ${expected}`);
  }
  assert.ok(await card.locator('time').count(), 'times are shown');
  await shot(page, 'approvals');

  await card.getByLabel('Comment (optional)').fill('Commit reviewed, ship it');
  await card.getByRole('button', { name: 'Approve', exact: true }).click();
  await waitForText(page.locator('#status'), 'Approved');
  await card.waitFor({ state: 'detached' });

  const { approval, issued } = await within(45_000, s.waiting, 'the waiting client');
  assert.equal(approval.status, 'approved');
  // The run sees that it was approved, not by whom nor why (people it could try to deceive).
  assert.equal(approval.decisions.length, 1);
  assert.equal(approval.decisions[0].decision, 'approve');
  assert.equal(approval.decisions[0].user, null);
  assert.equal(approval.decisions[0].comment, null);
  assert.equal(approval.policy, '');
  // The admin sees who decided, and why.
  const full = await must(200, 'GET', `/v1/admin/approvals/${s.approval.approval_id}`, { bearer: adminToken });
  assert.equal(full.decisions[0].user, 'dana');
  assert.equal(full.decisions[0].approver, 'dana-laptop');
  assert.equal(full.decisions[0].comment, 'Commit reviewed, ship it');
  assert.equal(issued.status, 201, JSON.stringify(issued.body));
  assert.ok(issued.body.token, 'a capability token');
  assert.equal(issued.body.args, s.approval.args, 'bound to the approved arguments');
  s.capability = issued.body;
  noProblems(page);
});

step('hostile arguments are text; the admin can only deny; a stale approve shows the refusal', async () => {
  // A broker may refuse the right-to-left override in arguments outright (as it
  // does in task attributes); then the markup alone goes through.
  let asked = await call('POST', '/v1/capabilities', { bearer: s.runToken, body: HOSTILE });
  const bidiRefused = asked.status === 400;
  if (bidiRefused) {
    assert.equal(typeof asked.body?.error?.code, 'string', `a refusal with a code: ${JSON.stringify(asked.body)}`);
    asked = await call('POST', '/v1/capabilities', {
      bearer: s.runToken,
      body: { ...HOSTILE, arguments: { ...HOSTILE.arguments, environment: 'staging' } },
    });
  }
  assert.equal(asked.status, 202, JSON.stringify(asked.body));
  const hostile = asked.body;
  const page = s.approverPage;
  await page.getByRole('button', { name: 'Refresh' }).click();
  const card = page.locator(`article[data-approval-id="${hostile.approval_id}"]`);
  await card.waitFor();
  const args = await card.locator('pre').innerText();
  assert.ok(args.includes('<img src=x onerror=alert(1)>'), 'the markup is shown as text');
  assert.ok(args.includes('<script>alert(2)</script>'));
  if (!bidiRefused) {
    assert.ok(args.includes('staging\\u202edorp'), 'the right-to-left override is spelled out');
    assert.ok(!args.includes('\u202E'), 'and not left in the text');
    await waitForText(card, 'invisible or direction-changing');
  }
  // What the page does with such characters, whichever way the broker went: the
  // served lib.js spells each one out.
  const revealed = await page.evaluate(async () => {
    const { reveal } = await import('/console/lib.js');
    return reveal('a\u202Eb\u200Bc\u2066d\uFEFFe\u0085f\u{E0041}g');
  });
  assert.deepEqual(revealed, { text: 'a\\u202eb\\u200bc\\u2066d\\ufeffe\\u0085f\\udb40\\udc41g', hidden: 6 });
  assert.equal(await card.locator('pre *').count(), 0, 'the arguments are a text node only');
  assert.equal(await page.locator('img').count(), 0, 'no img element was created');
  assert.equal(await page.locator('main script').count(), 0, 'no script element was created');
  await shot(card, 'hostile-arguments');

  // The admin sees it with Deny only, and denies it.
  const { page: adminPage } = await openPage('admin');
  s.adminPage = adminPage;
  await signIn(adminPage, adminToken);
  const nav = await adminPage.getByRole('navigation').getByRole('link').allInnerTexts();
  assert.deepEqual(nav, ['Approvals', 'Runs', 'Audit', 'Revocations']);
  const adminCard = adminPage.locator(`article[data-approval-id="${hostile.approval_id}"]`);
  await adminCard.waitFor();
  assert.equal(await adminCard.getByRole('button', { name: 'Approve', exact: true }).count(), 0, 'no Approve for the admin');
  assert.equal(await adminPage.locator('img').count(), 0);
  await adminCard.getByLabel('Comment (optional)').fill('Not this one');
  await adminCard.getByRole('button', { name: 'Deny', exact: true }).click();
  await waitForText(adminPage.getByRole('status').last(), 'Denied');
  await adminCard.waitFor({ state: 'detached' });
  const denied = await must(200, 'GET', `/v1/admin/approvals/${hostile.approval_id}`, { bearer: adminToken });
  assert.equal(denied.status, 'denied');

  // Dana's page still shows it: approving now is refused, and the refusal is shown.
  await card.getByRole('button', { name: 'Approve', exact: true }).click();
  await waitForText(page.getByRole('alert').first(), 'approval_decided');
  await card.waitFor({ state: 'detached' });
  noProblems(page);
  noProblems(adminPage);
});

step('the admin ends the run from its page, after a confirmation, and its lease is revoked', async () => {
  const exchanged = await call('POST', '/v1/exchange', { body: { capability: s.capability.token } });
  assert.ok([200, 201].includes(exchanged.status), `exchange: ${exchanged.status} ${JSON.stringify(exchanged.body)}`);
  const leaseId = exchanged.body.lease_id;
  assert.match(leaseId, /^[0-9a-f-]{36}$/);

  const page = s.adminPage;
  await page.getByRole('navigation').getByRole('link', { name: 'Runs' }).click();
  await page.getByRole('heading', { name: 'Runs', level: 1 }).waitFor();
  await page.getByLabel('User', { exact: true }).fill('bob');
  await page.getByRole('button', { name: 'Apply' }).click();
  const link = page.getByRole('link', { name: s.runId });
  await link.waitFor();
  await shot(page, 'runs');
  await link.click();

  await page.getByRole('heading', { level: 1 }).filter({ hasText: s.runId }).waitFor();
  const leaseRow = page.locator('tr', { hasText: leaseId });
  await waitForText(leaseRow, 'live');
  await waitForText(page.locator('tr', { hasText: s.capability.capability_id }).first(), 'invoke');
  await shot(page, 'run-detail');

  await page.getByRole('button', { name: 'End run…' }).click();
  const confirm = page.getByRole('button', { name: 'Confirm: end run' });
  await confirm.waitFor();
  assert.equal((await call('GET', `/v1/runs/${s.runId}`, { bearer: adminToken })).body.state, 'active', 'nothing ended before the confirmation');
  await confirm.click();
  await waitForText(page.locator('.outcome'), /Run ended\. Revoked \d+ capabilit(y|ies) and 1 lease/);
  await waitForText(page.locator('tr', { hasText: leaseId }), 'revoked');
  assert.equal(await page.getByRole('button', { name: 'End run…' }).count(), 0, 'an ended run has no End button');
  await shot(page, 'run-ended');

  const run = await must(200, 'GET', `/v1/runs/${s.runId}`, { bearer: adminToken });
  assert.equal(run.state, 'ended');
  assert.ok(run.leases.length >= 1 && run.leases.every((l) => l.revoked_at), 'every lease revoked');
  assert.ok(run.capabilities.every((c) => c.state !== 'active'), 'no capability active');
  noProblems(page);
});

step('the audit page shows the run\'s rows and the chain verification', async () => {
  const page = s.adminPage;
  await page.getByRole('navigation').getByRole('link', { name: 'Audit' }).click();
  await page.getByRole('heading', { name: 'Audit', level: 1 }).waitFor();
  await waitForText(page.locator('#chain-status'), 'Chain intact');
  await page.getByLabel('Run', { exact: true }).fill(s.runId);
  await page.getByRole('button', { name: 'Apply' }).click();
  // Apply renders the page again: until then the unfiltered table (and its
  // caption) is still there, and while it renders there is none. So wait for
  // the filtered rows themselves, each row's event and run read together: a
  // filter that let another run's rows through would time out here.
  let rows = [];
  for (const deadline = Date.now() + 15_000; ; ) {
    rows = await page
      .locator('table.audit tbody tr')
      .evaluateAll((trs) => trs.map((tr) => [tr.cells[2]?.innerText ?? '', tr.cells[7]?.innerText ?? '']));
    if (rows.length && rows.every(([, run]) => run === s.runId)) break;
    if (Date.now() > deadline) assert.fail(`the rows of run ${s.runId} did not show: ${JSON.stringify(rows.slice(0, 20))}`);
    await sleep(100);
  }
  const events = rows.map(([event]) => event);
  assert.ok(events.includes('run.started'), `run.started in ${events}`);
  assert.ok(events.includes('capability.issued'), `capability.issued in ${events}`);
  assert.ok(events.includes('run.ended'), `run.ended in ${events}`);
  assert.ok(events.some((e) => /approv/.test(e)), `an approval event in ${events}`);
  await waitForText(page.locator('#chain-status'), 'Chain intact');
  await shot(page, 'audit');

  // The newest stored checkpoint is shown, with what the broker's store says of it.
  const latest = await must(200, 'GET', '/v1/admin/audit/checkpoints/latest', { bearer: adminToken });
  await waitForText(page.locator('#latest-checkpoint'), latest.latest ? `${latest.latest.seq}` : 'No checkpoint yet');
  // A pasted line that is not a checkpoint is reported, not trusted.
  await page.getByLabel('Checkpoints from a witness').fill('not-a-checkpoint');
  await page.getByRole('button', { name: 'Check checkpoints' }).click();
  await waitForText(page.locator('#checkpoint-status'), 'malformed');
  noProblems(page);
});

step('the revocations page lists pending downstream removals', async () => {
  const page = s.adminPage;
  await page.getByRole('navigation').getByRole('link', { name: 'Revocations' }).click();
  await page.getByRole('heading', { name: 'Revocations', level: 1 }).waitFor();
  await page.locator('.empty, table').first().waitFor();
  await page.getByLabel('Only stuck ones').check();
  await page.waitForURL(/stuck=true/);
  await page.locator('.empty, table').first().waitFor();
  await shot(page, 'revocations');
  noProblems(page);
});

step('an approver key sees only approvals; sign-out and a refused key go back to sign-in', async () => {
  const page = s.approverPage;
  await page.goto(`${base}/console#/runs`);
  await page.getByRole('heading', { name: 'Admin token needed', level: 1 }).waitFor();
  await page.goto(`${base}/console#/audit`);
  await page.getByRole('heading', { name: 'Admin token needed', level: 1 }).waitFor();

  await page.getByRole('button', { name: 'Sign out' }).click();
  await page.getByRole('heading', { name: 'Sign in', level: 1 }).waitFor();
  assert.deepEqual((await storage(page)).session, [], 'sign-out forgets the key');

  // Keys the console does not take, and one the broker does not know.
  await page.getByLabel('Key').fill('tsr_rt_notakeyforthis');
  await page.getByRole('button', { name: 'Sign in' }).click();
  await waitForText(page.getByRole('alert'), 'runtime key');
  await page.getByLabel('Key').fill('hello');
  await page.getByRole('button', { name: 'Sign in' }).click();
  await waitForText(page.getByRole('alert'), 'Not a console key');
  await page.getByLabel('Key').fill(`tsr_adm_${'x'.repeat(43)}`);
  await page.getByRole('button', { name: 'Sign in' }).click();
  await waitForText(page.getByRole('alert'), 'did not accept');
  assert.deepEqual((await storage(page)).session, []);

  // A key that stops working mid-session (a 401): back to sign-in with a message.
  await signIn(page, s.danaKey);
  await page.evaluate((bogus) => {
    for (const k of Object.keys(sessionStorage)) sessionStorage.setItem(k, bogus);
  }, `tsr_apr_${'y'.repeat(43)}`);
  await page.getByRole('button', { name: 'Refresh' }).click();
  await page.getByRole('heading', { name: 'Sign in', level: 1 }).waitFor();
  await waitForText(page.locator('main'), 'no longer accepts');
  assert.deepEqual((await storage(page)).session, []);
  noProblems(page);
});
