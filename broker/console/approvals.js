// The approvals page: requests an AI agent's run made that policy holds for a
// human (@approval), with everything the approver needs to decide, shown as
// text. An approver key lists and decides what it may decide; the admin token
// lists all and may only deny.

import { ApiError, api, clear, code, facts, h, prettyJson, relative, reveal, time, uid } from './lib.js';

const STATUSES = ['pending', 'approved', 'denied', 'expired', 'all'];

export async function approvalsPage(section, ctx) {
  const admin = ctx.kind === 'admin';
  const status = admin && STATUSES.includes(ctx.params.get('status')) ? ctx.params.get('status') : 'pending';

  section.append(
    h('h1', {}, 'Approvals'),
    h(
      'p',
      { class: 'lead' },
      admin
        ? 'Requests a policy holds for a human decision. With the admin token you can deny a request; approving it takes an approver key of the group the rule names.'
        : 'Requests waiting for your decision. Read the arguments: they are exactly what the agent asked to run with, and the capability will be bound to them.',
    ),
  );

  const alert = h('p', { class: 'error', role: 'alert', hidden: true });
  // Shown when a background check finds the list changed; the cards are not
  // redrawn under the reader's eyes (or their comment).
  const changedText = h('span', {});
  const showCurrent = h('button', { type: 'button', class: 'secondary' }, 'Show the current list');
  const changed = h('p', { class: 'notice', role: 'status', hidden: true }, changedText, ' ', showCurrent);
  const list = h('div', { class: 'cards', 'aria-busy': 'true' });
  const refresh = h('button', { type: 'button', class: 'secondary' }, 'Refresh');
  const toolbar = h('div', { class: 'toolbar' });
  if (admin) {
    const sel = h(
      'select',
      { id: 'approval-status', name: 'status' },
      STATUSES.map((s) => h('option', { value: s, selected: s === status ? true : null }, s)),
    );
    sel.addEventListener('change', () => ctx.navigate(ctx.hashFor('/approvals', { status: sel.value === 'pending' ? '' : sel.value })));
    toolbar.append(h('label', { for: 'approval-status' }, 'Status'), sel);
  }
  toolbar.append(refresh);
  section.append(toolbar, changed, alert, list);

  const showAlert = (message) => {
    alert.textContent = message;
    alert.hidden = !message;
  };

  const fetchList = async () => {
    const answer = admin
      ? await api('GET', '/v1/admin/approvals', { query: { status } })
      : await api('GET', '/v1/approvals', { query: { status: 'pending' } });
    return Array.isArray(answer?.approvals) ? answer.approvals : [];
  };
  // The ids on screen, to tell when the list changed underneath.
  let shown = new Set();

  async function load() {
    list.setAttribute('aria-busy', 'true');
    refresh.disabled = true;
    let approvals;
    try {
      approvals = await fetchList();
    } finally {
      refresh.disabled = false;
      list.setAttribute('aria-busy', 'false');
    }
    if (!ctx.alive()) return [];
    shown = new Set(approvals.map((a) => a.approval_id));
    changed.hidden = true;
    clear(list);
    if (!approvals.length) {
      list.append(
        h('p', { class: 'empty' }, status === 'pending' ? 'Nothing is waiting for a decision.' : `No ${status === 'all' ? '' : `${status} `}approvals.`),
      );
      return approvals;
    }
    list.append(h('p', { class: 'count' }, `${approvals.length} ${status === 'all' ? '' : `${status} `}approval${approvals.length === 1 ? '' : 's'}`));
    for (const approval of approvals) list.append(card(approval, { admin, decide }));
    return approvals;
  }

  async function decide(approval, decision, comment, buttons) {
    showAlert('');
    for (const b of buttons) b.disabled = true;
    const id = encodeURIComponent(approval.approval_id);
    const path = admin ? `/v1/admin/approvals/${id}/deny` : `/v1/approvals/${id}/${decision}`;
    const what = `${approval.action} ${approval.resource}`;
    try {
      const result = await api('POST', path, { body: comment ? { comment } : {} });
      const done = decision === 'approve' ? 'Approved' : 'Denied';
      const now = result?.status && result.status !== 'pending' ? ` It is now ${result.status}.` : '';
      ctx.announce(`${done}: ${reveal(what).text} (approval ${approval.approval_id}).${now}`);
    } catch (e) {
      if (!(e instanceof ApiError)) throw e;
      const verb = decision === 'approve' ? 'approve' : 'deny';
      const message = `Could not ${verb} ${reveal(what).text}: ${e.text}`;
      showAlert(message);
      ctx.announce(message, { error: true });
      // Decided elsewhere, or this key already voted: show what is true now.
      if (e.code !== 'approval_decided' && e.code !== 'already_voted') {
        for (const b of buttons) b.disabled = false;
        return;
      }
    }
    await load().catch((e) => showAlert(e.text || e.message));
  }

  // Every 15 s while this page is shown (and the tab visible): has the list changed?
  const timer = setInterval(async () => {
    if (!ctx.alive()) {
      clearInterval(timer);
      return;
    }
    if (document.hidden || !changed.hidden) return;
    let now;
    try {
      now = await fetchList();
    } catch {
      return; // a 401 signs out by itself; anything else: the next tick tries again
    }
    if (!ctx.alive()) return;
    const ids = new Set(now.map((a) => a.approval_id));
    const added = [...ids].filter((id) => !shown.has(id)).length;
    const gone = [...shown].filter((id) => !ids.has(id)).length;
    if (!added && !gone) return;
    const parts = [];
    if (added) parts.push(`${added} new`);
    if (gone) parts.push(`${gone} no longer ${status === 'all' ? 'listed' : status}`);
    changedText.textContent = `The list has changed: ${parts.join(', ')}.`;
    changed.hidden = false;
  }, 15000);
  showCurrent.addEventListener('click', () => {
    load()
      .then((a) => ctx.announce(`Approvals refreshed: ${a.length} shown.`))
      .catch((e) => showAlert(e.text || e.message));
  });

  refresh.addEventListener('click', () => {
    showAlert('');
    load()
      .then((a) => ctx.announce(`Approvals refreshed: ${a.length} shown.`))
      .catch((e) => showAlert(e.text || e.message));
  });

  await load();
}

/** One approval as an <article>. */
export function card(a, { admin, decide, runLink = admin }) {
  const headingId = uid('approval');
  const pending = a.status === 'pending';
  const args = prettyJson(a.arguments ?? {});
  // Every rule must be met: e.g. [{rule: 'group:finance', required: 2}, {rule: 'group:release', required: 1}].
  const rules = Array.isArray(a.approvers) ? a.approvers : [];
  const ruleText = rules.map((r) => ((r.required ?? 1) > 1 ? `${r.required} of ${r.rule}` : r.rule)).join('; ');
  const decisions = Array.isArray(a.decisions) ? a.decisions : [];
  const approvals = decisions.filter((d) => d.decision === 'approve').length;

  const run = a.run_id ? (runLink ? h('a', { href: `#/runs/${encodeURIComponent(a.run_id)}` }, code(a.run_id)) : code(a.run_id)) : null;
  const article = h(
    'article',
    { class: `card status-${safeClass(a.status)}`, 'aria-labelledby': headingId, 'data-approval-id': a.approval_id },
    h(
      'header',
      {},
      h('h2', { id: headingId }, code(a.action), ' ', code(a.resource)),
      h('span', { class: `badge ${safeClass(a.status)}` }, a.status ?? 'unknown'),
    ),
    facts([
      ['Approval', code(a.approval_id)],
      ['Run', run],
      ['User', a.user ? code(a.user) : null],
      ['Task', a.task_id || a.task_kind ? [code(a.task_id ?? '?'), ' (kind ', code(a.task_kind ?? '?'), ')'] : null],
      ['Runtime', a.runtime ? code(a.runtime) : null],
      ['Action', code(a.action)],
      ['Resource', code(a.resource)],
      ['Policy', a.policy ? code(a.policy) : null],
      ['Approvers', ruleText ? [code(ruleText), rules.length > 1 ? ' (every rule must be met)' : ''] : null],
      ['Requested', time(a.created_at)],
      ['Expires', a.expires_at ? [time(a.expires_at), pending ? ` (${relative(a.expires_at)})` : ''] : null],
      ['Decided', a.decided_at ? time(a.decided_at) : null],
      ['Capability', a.capability_id ? code(a.capability_id) : null],
    ]),
    h('h3', {}, 'Arguments'),
    args.hidden
      ? h(
          'p',
          { class: 'warning' },
          `The arguments contain ${args.hidden} invisible or direction-changing character${args.hidden === 1 ? '' : 's'}, shown below as \\uXXXX. Text around them may not be what it seems.`,
        )
      : null,
    h('pre', { class: 'arguments', tabindex: '0' }, args.text),
    h('p', { class: 'hash' }, 'SHA-256 of the arguments (JCS): ', code(a.args ?? '')),
    h('h3', {}, `Decisions (${approvals} approving)`),
    decisions.length
      ? h(
          'ul',
          { class: 'decisions' },
          decisions.map((d) =>
            h(
              'li',
              {},
              h('strong', {}, d.decision === 'approve' ? 'Approved' : d.decision === 'deny' ? 'Denied' : reveal(String(d.decision)).text),
              ' by ',
              code(d.user ?? '?'),
              d.approver ? [' (', code(d.approver), ')'] : null,
              ' at ',
              time(d.at),
              d.comment ? [': ', h('q', {}, reveal(d.comment).text)] : null,
            ),
          ),
        )
      : h('p', { class: 'muted' }, 'None yet.'),
  );

  if (pending && decide) {
    const commentId = uid('comment');
    const comment = h('textarea', { id: commentId, name: 'comment', rows: '2', maxlength: '1000' });
    const buttons = [];
    const approve = admin ? null : h('button', { type: 'button', class: 'approve' }, 'Approve');
    const deny = h('button', { type: 'button', class: 'deny' }, 'Deny');
    if (approve) buttons.push(approve);
    buttons.push(deny);
    approve?.addEventListener('click', () => decide(a, 'approve', comment.value.trim(), buttons));
    deny.addEventListener('click', () => decide(a, 'deny', comment.value.trim(), buttons));
    article.append(
      h(
        'div',
        { class: 'decide', role: 'group', 'aria-label': 'Decision' },
        h('label', { for: commentId }, 'Comment (optional)'),
        comment,
        h('div', { class: 'buttons' }, buttons),
      ),
    );
  }
  return article;
}

function safeClass(value) {
  return /^[a-z_]{1,20}$/.test(value ?? '') ? value : 'unknown';
}
