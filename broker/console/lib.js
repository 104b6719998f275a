// Shared by every page: building DOM (never from HTML text), the session (the
// key lives in this tab's sessionStorage and nowhere else), and the API client.
//
// Everything the broker returns may hold text an AI agent chose (arguments,
// task attributes, resources): it only ever reaches the page as textContent or
// as an attribute value set with setAttribute, never as markup.

// ---------------------------------------------------------------- DOM

/**
 * h('a', {href: '#/runs', class: 'x', on: {click: fn}}, 'text', child, [more])
 * Strings become text nodes; null, undefined and false children are skipped.
 */
export function h(tag, attrs, ...children) {
  const el = document.createElement(tag);
  for (const [name, value] of Object.entries(attrs || {})) {
    if (value === null || value === undefined || value === false) continue;
    if (name === 'on') {
      for (const [event, fn] of Object.entries(value)) el.addEventListener(event, fn);
    } else if (name === 'style' || name.startsWith('on')) {
      // The CSP forbids inline styles and handlers; refuse them here too.
      throw new Error(`h(): attribute ${name} is not allowed`);
    } else if (name === 'hidden') {
      el.hidden = true;
    } else if (name === 'disabled') {
      el.disabled = true;
    } else if (name === 'value') {
      el.value = value;
    } else if (name === 'checked') {
      el.checked = true;
    } else {
      el.setAttribute(name, value === true ? '' : String(value));
    }
  }
  append(el, children);
  return el;
}

/** el.append(...) that skips null, undefined and false (the DOM's would write "null"). */
export function add(el, ...children) {
  append(el, children);
  return el;
}

function append(el, children) {
  for (const child of children) {
    if (child === null || child === undefined || child === false) continue;
    if (Array.isArray(child)) append(el, child);
    else if (child instanceof Node) el.append(child);
    else el.append(document.createTextNode(String(child)));
  }
}

/** Removes every child of el. */
export function clear(el) {
  while (el.firstChild) el.firstChild.remove();
}

let uniq = 0;
/** A fresh id for label/for and aria-labelledby pairs. */
export function uid(prefix) {
  uniq += 1;
  return `${prefix}-${uniq}`;
}

// Characters that would make what an approver reads differ from what the
// agent sent: control characters other than tab and newline, bidirectional
// controls, line and paragraph separators, and invisible or zero-width
// characters (the list the broker refuses in task attributes, docs/api.md, plus
// the C0 and C1 controls, DEL and the Hangul fillers).
const HIDDEN_CHARS =
  /[\u0000-\u0008\u000b-\u001f\u007f-\u009f\u00ad\u061c\u115f\u1160\u180e\u200b-\u200f\u2028-\u202e\u2060-\u2064\u2066-\u206f\u3164\ufe00-\ufe0f\ufeff\uffa0\ufff9-\ufffb\u{1d173}-\u{1d17a}\u{e0000}-\u{e007f}\u{e0100}-\u{e01ef}]/gu;

function escapeChar(ch) {
  let out = '';
  for (let i = 0; i < ch.length; i += 1) {
    out += `\\u${ch.charCodeAt(i).toString(16).padStart(4, '0')}`;
  }
  return out;
}

/**
 * Text with every hidden or direction-changing character spelled as \uXXXX
 * (UTF-16 units, so JSON text stays valid JSON). Returns {text, hidden}.
 */
export function reveal(text) {
  let hidden = 0;
  const out = String(text).replace(HIDDEN_CHARS, (ch) => {
    hidden += 1;
    return escapeChar(ch);
  });
  return { text: out, hidden };
}

/** Pretty JSON of a value, hidden characters revealed. Returns {text, hidden}. */
export function prettyJson(value) {
  return reveal(JSON.stringify(value, null, 2) ?? 'null');
}

/** A <time> element for an RFC 3339 string (or a dash for null). */
export function time(value) {
  if (!value) return h('span', { class: 'muted' }, '—');
  const text = reveal(String(value)).text;
  return h('time', { datetime: text, title: text }, text.replace('T', ' ').replace(/\.\d+Z$/, 'Z'));
}

/** "in 4 min" / "12 s ago" from an RFC 3339 string, against now. */
export function relative(value, now = Date.now()) {
  const t = Date.parse(value);
  if (Number.isNaN(t)) return '';
  const secs = Math.round((t - now) / 1000);
  const abs = Math.abs(secs);
  let text;
  if (abs < 90) text = `${abs} s`;
  else if (abs < 90 * 60) text = `${Math.round(abs / 60)} min`;
  else if (abs < 36 * 3600) text = `${Math.round(abs / 3600)} h`;
  else text = `${Math.round(abs / 86400)} d`;
  return secs >= 0 ? `in ${text}` : `${text} ago`;
}

/** A <dl> from [term, description] pairs; pairs with a null description are left out. */
export function facts(pairs, cls = 'facts') {
  const dl = h('dl', { class: cls });
  for (const [term, desc] of pairs) {
    if (desc === null || desc === undefined) continue;
    dl.append(h('dt', {}, term), h('dd', {}, desc));
  }
  return dl;
}

/** A table from column headings and rows of cells (strings or nodes). */
export function table(caption, headings, rows, cls = 'grid') {
  return h(
    'div',
    { class: 'table-wrap' },
    h(
      'table',
      { class: cls },
      h('caption', {}, caption),
      h('thead', {}, h('tr', {}, headings.map((t) => h('th', { scope: 'col' }, t)))),
      h(
        'tbody',
        {},
        rows.map((cells) => h('tr', {}, cells.map((c) => h('td', {}, c ?? h('span', { class: 'muted' }, '—'))))),
      ),
    ),
  );
}

/** Monospace text, hidden characters revealed. */
export function code(text) {
  return h('code', {}, reveal(text ?? '').text);
}

// ---------------------------------------------------------------- session

const STORAGE_KEY = 'tessera.console.key';

/** 'admin' for tsr_adm_, 'approver' for tsr_apr_, else null. */
export function keyKind(key) {
  if (typeof key !== 'string') return null;
  if (key.startsWith('tsr_adm_')) return 'admin';
  if (key.startsWith('tsr_apr_')) return 'approver';
  return null;
}

export const session = {
  get key() {
    return sessionStorage.getItem(STORAGE_KEY);
  },
  get kind() {
    return keyKind(this.key);
  },
  set(key) {
    sessionStorage.setItem(STORAGE_KEY, key);
  },
  clear() {
    sessionStorage.removeItem(STORAGE_KEY);
  },
};

// ---------------------------------------------------------------- API

export class ApiError extends Error {
  constructor(status, code, message, requestId) {
    super(message);
    this.status = status;
    this.code = code;
    this.requestId = requestId;
  }

  /** "message (code, request id …)" for the page. */
  get text() {
    const bits = [this.code, this.requestId && `request ${this.requestId}`].filter(Boolean);
    return bits.length ? `${this.message} (${bits.join(', ')})` : this.message;
  }
}

/** Called with the ApiError of every 401; app.js sends the user back to sign-in. */
let onUnauthorized = () => {};
export function setUnauthorizedHandler(fn) {
  onUnauthorized = fn;
}

/**
 * Calls the broker with the session's key. query: object of strings (empty
 * values are left out); body: a JSON value (sent as application/json).
 * Resolves to the parsed JSON body; rejects with an ApiError.
 */
export async function api(method, path, { query, body, key } = {}) {
  const bearer = key ?? session.key;
  let url = path;
  if (query) {
    const params = new URLSearchParams();
    for (const [name, value] of Object.entries(query)) {
      if (value !== undefined && value !== null && value !== '') params.set(name, String(value));
    }
    const qs = params.toString();
    if (qs) url += `?${qs}`;
  }
  const headers = { Accept: 'application/json' };
  if (bearer) headers.Authorization = `Bearer ${bearer}`;
  const init = { method, headers, cache: 'no-store', credentials: 'omit', redirect: 'error' };
  if (body !== undefined) {
    headers['Content-Type'] = 'application/json';
    init.body = JSON.stringify(body);
  }
  let res;
  try {
    res = await fetch(url, init);
  } catch (e) {
    throw new ApiError(0, 'network', `The broker could not be reached: ${e.message}`, null);
  }
  const text = await res.text();
  let data = null;
  if (text) {
    try {
      data = JSON.parse(text);
    } catch {
      data = null;
    }
  }
  if (res.ok) return data;
  const err = data && typeof data === 'object' && data.error && typeof data.error === 'object' ? data.error : {};
  const error = new ApiError(
    res.status,
    typeof err.code === 'string' ? err.code : `http_${res.status}`,
    typeof err.message === 'string' ? err.message : `HTTP ${res.status} ${res.statusText}`,
    typeof err.request_id === 'string' ? err.request_id : res.headers.get('x-request-id'),
  );
  if (res.status === 401 && !key) onUnauthorized(error);
  throw error;
}
