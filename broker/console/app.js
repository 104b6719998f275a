// The console's shell: sign-in, the nav, hash routing and the status region.
// Pages live in approvals.js and admin.js; lib.js builds DOM and calls the API.

import { api, clear, h, keyKind, session, setUnauthorizedHandler } from './lib.js';
import { approvalsPage } from './approvals.js';
import { auditPage, revocationsPage, runPage, runsPage } from './admin.js';

// Pages: the hash path (a regexp), who may open them, and the nav entry.
const ROUTES = [
  { path: /^\/approvals$/, page: approvalsPage, kinds: ['admin', 'approver'], nav: 'Approvals', href: '#/approvals' },
  { path: /^\/runs$/, page: runsPage, kinds: ['admin'], nav: 'Runs', href: '#/runs' },
  { path: /^\/runs\/([^/]+)$/, page: runPage, kinds: ['admin'], section: '#/runs' },
  { path: /^\/audit$/, page: auditPage, kinds: ['admin'], nav: 'Audit', href: '#/audit' },
  { path: /^\/revocations$/, page: revocationsPage, kinds: ['admin'], nav: 'Revocations', href: '#/revocations' },
];

const KIND_NAMES = { admin: 'admin token', approver: 'approver key' };

const main = document.getElementById('main');
const nav = document.getElementById('nav');
const who = document.getElementById('who');
const whoText = document.getElementById('who-text');
const status = document.getElementById('status');

// Where to go after signing in (the page asked for before it).
let afterSignIn = '#/approvals';
// A message for the next sign-in page (signed out, key refused).
let signInNotice = null;

/** Puts a message in the live region (read out by screen readers). */
export function announce(message, { error = false } = {}) {
  status.textContent = message;
  status.classList.toggle('error', error);
}

// Whether the next render keeps the status message (it was said by the action
// that navigates there: signed in, signed out, key refused).
let keepStatus = false;

/** The hash as {path, params}: "#/runs?user=bob" → {path: "/runs", params}. */
function parseHash() {
  const raw = location.hash.replace(/^#/, '') || '/';
  const q = raw.indexOf('?');
  const path = q === -1 ? raw : raw.slice(0, q);
  const params = new URLSearchParams(q === -1 ? '' : raw.slice(q + 1));
  return { path, params };
}

/** "#/runs" plus the non-empty params. */
export function hashFor(path, params = {}) {
  const qs = new URLSearchParams();
  for (const [name, value] of Object.entries(params)) {
    if (value !== undefined && value !== null && value !== '') qs.set(name, String(value));
  }
  const s = qs.toString();
  return `#${path}${s ? `?${s}` : ''}`;
}

export function navigate(hash, { keep = false } = {}) {
  keepStatus = keep;
  if (location.hash === hash) render();
  else location.hash = hash;
}

function renderNav(kind, current) {
  clear(nav);
  if (!kind) {
    nav.hidden = true;
    who.hidden = true;
    return;
  }
  const list = h('ul', {});
  for (const route of ROUTES) {
    if (!route.nav || !route.kinds.includes(kind)) continue;
    const here = current === route || current?.section === route.href;
    list.append(h('li', {}, h('a', { href: route.href, 'aria-current': here ? 'page' : null }, route.nav)));
  }
  nav.append(list);
  nav.hidden = false;
  whoText.textContent = `Signed in with an ${KIND_NAMES[kind]}`;
  who.hidden = false;
}

/** A fresh page container; the previous page's (possibly still loading) one is dropped. */
function freshPage() {
  clear(main);
  const section = h('div', { class: 'page' });
  main.append(section);
  return section;
}

function focusHeading(section) {
  const heading = section.querySelector('h1');
  if (heading) {
    heading.setAttribute('tabindex', '-1');
    heading.focus({ preventScroll: true });
  }
}

function render() {
  const { path, params } = parseHash();
  // A message belongs to the page it was said on, or to the action that led here.
  if (!keepStatus) announce('');
  keepStatus = false;
  const kind = session.kind;

  if (!kind) {
    if (session.key) session.clear(); // something else in storage: drop it
    if (path !== '/signin' && path !== '/') afterSignIn = location.hash;
    renderNav(null);
    signInPage(freshPage());
    return;
  }
  if (path === '/signin' || path === '/') {
    navigate('#/approvals', { keep: true });
    return;
  }
  let match = null;
  const route = ROUTES.find((r) => (match = r.path.exec(path)));
  renderNav(kind, route);
  const section = freshPage();
  document.title = 'Tessera console';
  if (!route) {
    section.append(h('h1', {}, 'Not found'), h('p', {}, 'There is no such page. ', h('a', { href: '#/approvals' }, 'Go to approvals'), '.'));
    focusHeading(section);
    return;
  }
  if (!route.kinds.includes(kind)) {
    section.append(
      h('h1', {}, 'Admin token needed'),
      h('p', {}, 'This page needs an admin token (tsr_adm_…). You are signed in with an approver key, which can only see and decide approvals.'),
      h('p', {}, h('a', { href: '#/approvals' }, 'Go to approvals')),
    );
    focusHeading(section);
    return;
  }
  const ctx = {
    kind,
    params,
    match,
    announce,
    navigate,
    hashFor,
    // Whether this page is still the one shown (a slow answer for a page the
    // user has left is dropped).
    alive: () => section.isConnected,
  };
  Promise.resolve(route.page(section, ctx))
    .catch((e) => {
      if (!section.isConnected) return;
      section.append(h('p', { class: 'error', role: 'alert' }, e.text || e.message));
    })
    .finally(() => {
      if (section.isConnected) document.title = `${section.querySelector('h1')?.textContent || 'Tessera'} — Tessera console`;
    });
  focusHeading(section);
}

// ---------------------------------------------------------------- sign-in

function signInPage(section) {
  document.title = 'Sign in — Tessera console';
  const error = h('p', { class: 'error', role: 'alert', id: 'signin-error', hidden: true });
  const input = h('input', {
    id: 'key',
    name: 'key',
    type: 'password',
    autocomplete: 'off',
    spellcheck: 'false',
    required: true,
    'aria-describedby': 'key-help signin-error',
  });
  const button = h('button', { type: 'submit' }, 'Sign in');
  const form = h(
    'form',
    { class: 'signin', novalidate: true },
    h('label', { for: 'key' }, 'Key'),
    input,
    h(
      'p',
      { id: 'key-help', class: 'help' },
      'An admin token (tsr_adm_…) or an approver key (tsr_apr_…). It is kept in this tab only (sessionStorage) and forgotten when the tab closes or you sign out.',
    ),
    error,
    button,
  );
  const showError = (message) => {
    error.textContent = message;
    error.hidden = false;
    input.setAttribute('aria-invalid', 'true');
    input.focus();
  };
  form.addEventListener('submit', async (event) => {
    event.preventDefault();
    const key = input.value.trim();
    if (!key) return showError('Enter a key.');
    const kind = keyKind(key);
    if (!kind) {
      if (key.startsWith('tsr_rt_')) return showError('That is a runtime key. The console takes an admin token (tsr_adm_…) or an approver key (tsr_apr_…).');
      if (key.startsWith('tsr_run_')) return showError('That is a run token. The console takes an admin token (tsr_adm_…) or an approver key (tsr_apr_…).');
      return showError('Not a console key: it must start with tsr_adm_ (admin token) or tsr_apr_ (approver key).');
    }
    button.disabled = true;
    try {
      // One cheap call the key's kind may make, so a wrong key fails here.
      if (kind === 'admin') await api('GET', '/v1/admin/runs', { key, query: { limit: 1 } });
      else await api('GET', '/v1/approvals', { key, query: { status: 'pending' } });
    } catch (e) {
      button.disabled = false;
      if (e.status === 401) return showError(`The broker did not accept this ${KIND_NAMES[kind]}: ${e.text}`);
      return showError(`Could not sign in: ${e.text}`);
    }
    input.value = '';
    session.set(key);
    announce(`Signed in with an ${KIND_NAMES[kind]}.`);
    const next = afterSignIn;
    afterSignIn = '#/approvals';
    navigate(next, { keep: true });
  });

  section.append(h('h1', {}, 'Sign in'));
  if (signInNotice) {
    section.append(h('p', { class: signInNotice.error ? 'notice error' : 'notice', role: signInNotice.error ? 'alert' : null }, signInNotice.message));
    signInNotice = null;
  }
  section.append(form);
  input.focus();
}

function signOut(message, { error = false } = {}) {
  session.clear();
  signInNotice = { message, error };
  announce(message, { error });
  navigate('#/signin', { keep: true });
}

document.getElementById('signout').addEventListener('click', () => signOut('Signed out. The key was removed from this tab.'));

setUnauthorizedHandler((e) => {
  if (!session.key) return;
  afterSignIn = location.hash || '#/approvals';
  signOut(`The broker no longer accepts this key (${e.code}). Sign in again.`, { error: true });
});

document.getElementById('skip').addEventListener('click', (event) => {
  event.preventDefault();
  main.focus();
});

window.addEventListener('hashchange', render);
render();
