// The admin token's pages: runs (list, detail, end), the audit log (rows,
// chain verification, checkpoints) and pending downstream revocations.

import { ApiError, add, api, clear, code, facts, h, reveal, relative, table, time, uid } from './lib.js';

const RUN_STATES = ['open', 'ended', 'all'];

function runLink(id) {
  return id ? h('a', { href: `#/runs/${encodeURIComponent(id)}` }, code(id)) : null;
}

function errorText(e) {
  return e instanceof ApiError ? e.text : e.message;
}

function plural(n, one, many = `${one}s`) {
  return `${n} ${n === 1 ? one : many}`;
}

/** A labelled input for a filter form. */
function field(label, input) {
  const id = input.id || uid('f');
  input.id = id;
  return h('div', { class: 'field' }, h('label', { for: id }, label), input);
}

// ---------------------------------------------------------------- runs

export async function runsPage(section, ctx) {
  const p = ctx.params;
  const filters = {
    user: p.get('user') ?? '',
    runtime: p.get('runtime') ?? '',
    state: RUN_STATES.includes(p.get('state')) ? p.get('state') : 'open',
  };
  const after = p.get('after') ?? '';

  const user = h('input', { name: 'user', type: 'text', value: filters.user, autocomplete: 'off', spellcheck: 'false' });
  const runtime = h('input', { name: 'runtime', type: 'text', value: filters.runtime, autocomplete: 'off', spellcheck: 'false' });
  const state = h(
    'select',
    { name: 'state' },
    RUN_STATES.map((s) => h('option', { value: s, selected: s === filters.state ? true : null }, s)),
  );
  const form = h(
    'form',
    { class: 'filters', 'aria-label': 'Filter runs' },
    field('User', user),
    field('Runtime', runtime),
    field('State', state),
    h('button', { type: 'submit' }, 'Apply'),
  );
  form.addEventListener('submit', (event) => {
    event.preventDefault();
    ctx.navigate(
      ctx.hashFor('/runs', {
        user: user.value.trim(),
        runtime: runtime.value.trim(),
        state: state.value === 'open' ? '' : state.value,
      }),
    );
  });

  section.append(h('h1', {}, 'Runs'), h('p', { class: 'lead' }, 'Runs the runtimes started for users, newest first. Open one to see its capabilities and leases, or to end it.'), form);
  const results = h('div', { 'aria-live': 'polite', 'aria-busy': 'true' });
  section.append(results);

  const answer = await api('GET', '/v1/admin/runs', {
    query: { user: filters.user, runtime: filters.runtime, state: filters.state, after, limit: 50 },
  });
  if (!ctx.alive()) return;
  results.setAttribute('aria-busy', 'false');
  const runs = Array.isArray(answer?.runs) ? answer.runs : [];
  if (!runs.length) {
    results.append(h('p', { class: 'empty' }, after ? 'No more runs.' : 'No runs match.'));
  } else {
    results.append(
      table(
        `${plural(runs.length, 'run')} (${filters.state})`,
        ['Run', 'User', 'Task', 'Kind', 'Runtime', 'State', 'Started', 'Expires', 'Ended'],
        runs.map((r) => [
          runLink(r.run_id),
          code(r.user),
          code(r.task?.id),
          code(r.task?.kind),
          code(r.runtime),
          h('span', { class: `badge ${/^[a-z]+$/.test(r.state) ? r.state : 'unknown'}` }, r.state),
          time(r.created_at),
          time(r.expires_at),
          time(r.ended_at),
        ]),
      ),
    );
  }
  const pager = h('p', { class: 'pager' });
  if (after) pager.append(h('a', { href: ctx.hashFor('/runs', { ...filters, state: filters.state === 'open' ? '' : filters.state }) }, 'First page'), ' ');
  if (answer?.next_cursor) {
    pager.append(
      h(
        'a',
        { href: ctx.hashFor('/runs', { ...filters, state: filters.state === 'open' ? '' : filters.state, after: answer.next_cursor }) },
        'Next page',
      ),
    );
  }
  if (pager.childNodes.length) results.append(pager);
}

export async function runPage(section, ctx) {
  const id = decodeURIComponent(ctx.match[1]);
  section.append(
    h('p', { class: 'crumbs' }, h('a', { href: '#/runs' }, 'Runs'), ' / run'),
    h('h1', {}, 'Run ', code(id)),
  );
  const outcome = h('div', { class: 'outcome', hidden: true, role: 'status' });
  const body = h('div', { 'aria-busy': 'true' });
  section.append(outcome, body);

  async function load() {
    body.setAttribute('aria-busy', 'true');
    const path = `/v1/runs/${encodeURIComponent(id)}`;
    // The run first: a 404 is the whole answer. The rest is extra context.
    const run = await api('GET', path);
    const [approvals, pendingRevocations] = await Promise.all([
      api('GET', '/v1/admin/approvals', { query: { run_id: id, status: 'all' } }).catch((e) => ({ error: e })),
      api('GET', '/v1/admin/leases', { query: { limit: 1000 } }).catch((e) => ({ error: e })),
    ]);
    if (!ctx.alive()) return;
    clear(body);
    body.setAttribute('aria-busy', 'false');
    renderRun(body, run, approvals, pendingRevocations);
  }

  function renderRun(target, run, approvals, pendingRevocations) {
    const attributes = run.task?.attributes && typeof run.task.attributes === 'object' ? Object.entries(run.task.attributes) : [];
    target.append(
      facts([
        ['State', h('span', { class: `badge ${/^[a-z]+$/.test(run.state) ? run.state : 'unknown'}` }, run.state)],
        ['User', code(run.user)],
        ['Task', [code(run.task?.id), ' (kind ', code(run.task?.kind), ')']],
        ['Task attributes', attributes.length ? h('ul', { class: 'plain' }, attributes.map(([k, v]) => h('li', {}, code(k), ' = ', code(v)))) : null],
        ['Runtime id', code(run.runtime_id)],
        ['Labels', Array.isArray(run.labels) && run.labels.length ? run.labels.map((l, i) => [i ? ', ' : '', code(l)]) : null],
        ['Started', time(run.created_at)],
        ['Expires', [time(run.expires_at), run.state === 'active' ? ` (${relative(run.expires_at)})` : '']],
        ['Ended', run.ended_at ? time(run.ended_at) : null],
      ]),
      h('p', {}, h('a', { href: ctx.hashFor('/audit', { run: run.run_id }) }, 'Audit rows of this run')),
    );

    if (run.state === 'active') target.append(endControls(run));

    const caps = Array.isArray(run.capabilities) ? run.capabilities : [];
    target.append(h('h2', {}, 'Capabilities'));
    target.append(
      caps.length
        ? table(
            plural(caps.length, 'capability', 'capabilities'),
            ['Capability', 'Action', 'Resource', 'Issued', 'Expires', 'Uses left', 'State', 'Revoked'],
            caps.map((c) => [
              code(c.capability_id),
              code(c.action),
              code(c.resource),
              time(c.issued_at),
              time(c.expires_at),
              `${c.uses_left} of ${c.uses}`,
              h('span', { class: `badge ${/^[a-z]+$/.test(c.state) ? c.state : 'unknown'}` }, c.state),
              time(c.revoked_at),
            ]),
          )
        : h('p', { class: 'empty' }, 'No capabilities were issued to this run.'),
    );

    const pending = new Map();
    for (const r of Array.isArray(pendingRevocations?.revocations) ? pendingRevocations.revocations : []) pending.set(r.lease_id, r);
    const leases = Array.isArray(run.leases) ? run.leases : [];
    target.append(h('h2', {}, 'Leases'));
    target.append(
      leases.length
        ? table(
            plural(leases.length, 'lease'),
            ['Lease', 'Capability', 'Backend', 'Kind', 'Created', 'Expires', 'Revocation'],
            leases.map((l) => [
              code(l.lease_id),
              code(l.capability_id),
              code(l.backend),
              code(l.kind),
              time(l.created_at),
              time(l.expires_at),
              leaseState(l, pending.get(l.lease_id)),
            ]),
          )
        : h('p', { class: 'empty' }, 'No leases: no capability of this run was exchanged.'),
    );
    if (pendingRevocations?.error) {
      target.append(h('p', { class: 'muted' }, `Pending downstream removals could not be read: ${errorText(pendingRevocations.error)}`));
    }

    target.append(h('h2', {}, 'Approvals'));
    if (approvals?.error) {
      target.append(h('p', { class: 'muted' }, `Approvals could not be read: ${errorText(approvals.error)}`));
    } else {
      const list = Array.isArray(approvals?.approvals) ? approvals.approvals : [];
      target.append(
        list.length
          ? table(
              plural(list.length, 'approval'),
              ['Approval', 'Action', 'Resource', 'Status', 'Requested', 'Decided', 'Capability'],
              list.map((a) => [
                code(a.approval_id),
                code(a.action),
                code(a.resource),
                h('span', { class: `badge ${/^[a-z]+$/.test(a.status) ? a.status : 'unknown'}` }, a.status),
                time(a.created_at),
                time(a.decided_at),
                a.capability_id ? code(a.capability_id) : null,
              ]),
            )
          : h('p', { class: 'empty' }, 'This run asked for no approval.'),
      );
      if (list.some((a) => a.status === 'pending')) {
        target.append(h('p', {}, h('a', { href: '#/approvals' }, 'Pending approvals')));
      }
    }
  }

  function leaseState(lease, pendingRemoval) {
    if (pendingRemoval) {
      return h(
        'span',
        { class: pendingRemoval.stuck ? 'badge stuck' : 'badge pending' },
        pendingRemoval.stuck ? 'revoked, downstream removal stuck' : 'revoked, downstream removal pending',
        ` (${plural(pendingRemoval.attempts, 'attempt')})`,
      );
    }
    if (lease.revoked_at) return h('span', {}, h('span', { class: 'badge revoked' }, 'revoked'), ' ', time(lease.revoked_at));
    if (Date.parse(lease.expires_at) < Date.now()) return h('span', { class: 'badge expired' }, 'expired');
    return h('span', { class: 'badge active' }, 'live');
  }

  function endControls(run) {
    const box = h('div', { class: 'end-run' });
    const start = h('button', { type: 'button', class: 'danger' }, 'End run…');
    const confirmId = uid('confirm');
    const confirm = h('button', { type: 'button', class: 'danger' }, 'Confirm: end run');
    const cancel = h('button', { type: 'button', class: 'secondary' }, 'Cancel');
    const panel = h(
      'div',
      { class: 'confirm', hidden: true, role: 'group', 'aria-labelledby': confirmId },
      h(
        'p',
        { id: confirmId },
        h('strong', {}, 'End this run? '),
        'Every capability and lease it holds is revoked at once, its downstream credentials are removed, and its pending approvals are cancelled. The agent cannot use it again.',
      ),
      h('div', { class: 'buttons' }, confirm, cancel),
    );
    start.addEventListener('click', () => {
      start.hidden = true;
      panel.hidden = false;
      cancel.focus();
    });
    cancel.addEventListener('click', () => {
      panel.hidden = true;
      start.hidden = false;
      start.focus();
    });
    confirm.addEventListener('click', async () => {
      confirm.disabled = true;
      cancel.disabled = true;
      try {
        const answer = await api('POST', `/v1/runs/${encodeURIComponent(run.run_id)}/end`);
        const r = answer?.revoked ?? {};
        const message = `Run ended. Revoked ${plural(r.capabilities ?? 0, 'capability', 'capabilities')} and ${plural(r.leases ?? 0, 'lease')}; cancelled ${plural(r.pending ?? 0, 'pending approval')}.`;
        clear(outcome);
        outcome.append(h('p', {}, message));
        outcome.classList.remove('error');
        outcome.hidden = false;
        ctx.announce(message);
      } catch (e) {
        clear(outcome);
        outcome.append(h('p', {}, `The run was not ended: ${errorText(e)}`));
        outcome.classList.add('error');
        outcome.hidden = false;
        ctx.announce(`The run was not ended: ${errorText(e)}`, { error: true });
        confirm.disabled = false;
        cancel.disabled = false;
        return;
      }
      await load().catch((e) => body.append(h('p', { class: 'error', role: 'alert' }, errorText(e))));
    });
    box.append(start, panel);
    return box;
  }

  await load();
}

// ---------------------------------------------------------------- audit

export async function auditPage(section, ctx) {
  const p = ctx.params;
  const filters = {
    run: p.get('run') ?? '',
    user: p.get('user') ?? '',
    event: p.get('event') ?? '',
    decision: ['allow', 'deny', 'error'].includes(p.get('decision')) ? p.get('decision') : '',
  };
  const before = p.get('before') ?? '';

  section.append(h('h1', {}, 'Audit'));

  // Chain verification (GET /v1/admin/audit/verify) at the top: it is the answer
  // to "can these rows be trusted".
  const verifyResult = h('div', { class: 'verify', 'aria-live': 'polite' }, h('p', { class: 'muted' }, 'Verifying the chain…'));
  const verifyButton = h('button', { type: 'button', class: 'secondary' }, 'Verify again');
  let head = null;
  section.append(h('section', { 'aria-labelledby': 'chain-h' }, h('h2', { id: 'chain-h' }, 'Chain verification'), verifyResult, verifyButton));

  async function verify() {
    verifyButton.disabled = true;
    try {
      const v = await api('GET', '/v1/admin/audit/verify');
      head = v;
      clear(verifyResult);
      if (v.ok) {
        add(verifyResult,
          h(
            'p',
            { class: 'ok', id: 'chain-status' },
            h('strong', {}, 'Chain intact. '),
            `${plural(v.rows, 'row')} verified; head at row ${v.head_seq}, link `,
            code(String(v.head_hash ?? '').slice(0, 16)),
            '…',
          ),
          v.unkeyed_rows
            ? h('p', { class: 'muted' }, `${plural(v.unkeyed_rows, 'row')} at the start predate the keyed chain: they prove order, not that nobody rewrote them.`)
            : null,
          h('p', { class: 'muted' }, 'The links alone cannot show that the newest rows were cut off: check checkpoints held outside the database (below).'),
        );
      } else {
        const fp = v.first_problem ?? {};
        verifyResult.append(
          h(
            'p',
            { class: 'error', id: 'chain-status', role: 'alert' },
            h('strong', {}, 'Chain broken. '),
            `First problem at row ${fp.seq}: ${fp.kind}`,
            fp.detail ? ` — ${reveal(fp.detail).text}` : '',
            ` (${plural(v.rows, 'row')} walked, head at row ${v.head_seq}).`,
          ),
        );
      }
    } catch (e) {
      clear(verifyResult);
      verifyResult.append(h('p', { class: 'error', id: 'chain-status' }, `Could not verify: ${errorText(e)}`));
    } finally {
      verifyButton.disabled = false;
    }
  }
  verifyButton.addEventListener('click', () => verify().then(() => ctx.announce('Chain verified again.')));

  // Rows.
  const run = h('input', { name: 'run', type: 'text', size: '38', value: filters.run, autocomplete: 'off', spellcheck: 'false', placeholder: 'run id' });
  const user = h('input', { name: 'user', type: 'text', value: filters.user, autocomplete: 'off', spellcheck: 'false' });
  const event = h('input', { name: 'event', type: 'text', value: filters.event, autocomplete: 'off', spellcheck: 'false', placeholder: 'e.g. capability.*' });
  const decision = h(
    'select',
    { name: 'decision' },
    ['', 'allow', 'deny', 'error'].map((d) => h('option', { value: d, selected: d === filters.decision ? true : null }, d || 'any')),
  );
  const form = h(
    'form',
    { class: 'filters', 'aria-label': 'Filter audit rows' },
    field('Run', run),
    field('User', user),
    field('Event', event),
    field('Decision', decision),
    h('button', { type: 'submit' }, 'Apply'),
  );
  form.addEventListener('submit', (e) => {
    e.preventDefault();
    ctx.navigate(
      ctx.hashFor('/audit', { run: run.value.trim(), user: user.value.trim(), event: event.value.trim(), decision: decision.value }),
    );
  });
  const rows = h('div', { 'aria-busy': 'true' });
  section.append(h('section', { 'aria-labelledby': 'rows-h' }, h('h2', { id: 'rows-h' }, 'Rows'), form, rows));

  // The newest checkpoint the store holds (what the broker last signed), then
  // the check that counts: the witness's own lines, pasted, against the store.
  section.append(latestCheckpointSection());
  section.append(checkpointsSection(() => head));

  const rowsPromise = api('GET', '/v1/admin/audit', { query: { ...filters, order: 'desc', before, limit: 100 } })
    .then((page) => {
      if (!ctx.alive()) return;
      rows.setAttribute('aria-busy', 'false');
      const events = Array.isArray(page?.events) ? page.events : [];
      if (!events.length) {
        rows.append(h('p', { class: 'empty' }, 'No rows match.'));
        return;
      }
      rows.append(
        table(
          `${plural(events.length, 'row')}, newest first`,
          ['Seq', 'Time', 'Event', 'Actor', 'Decision', 'Reason', 'User', 'Run', 'Capability', 'Action', 'Resource', 'Detail'],
          events.map((r) => [
            String(r.seq),
            time(r.at),
            code(r.event),
            code(r.actor),
            h('span', { class: `badge ${/^[a-z]+$/.test(r.decision) ? r.decision : 'unknown'}` }, r.decision),
            r.reason ? code(r.reason) : null,
            r.user ? code(r.user) : null,
            runLink(r.run_id),
            r.capability_id ? code(r.capability_id) : null,
            r.action ? code(r.action) : null,
            r.resource ? code(r.resource) : null,
            r.detail ? h('span', { class: 'detail' }, reveal(r.detail).text) : null,
          ]),
          'grid audit',
        ),
      );
      const pager = h('p', { class: 'pager' });
      if (before) pager.append(h('a', { href: ctx.hashFor('/audit', filters) }, 'Newest rows'), ' ');
      if (page.next_cursor !== null && page.next_cursor !== undefined) {
        pager.append(h('a', { href: ctx.hashFor('/audit', { ...filters, before: page.next_cursor }) }, 'Older rows'));
      }
      if (pager.childNodes.length) rows.append(pager);
    })
    .catch((e) => {
      if (!ctx.alive()) return;
      rows.setAttribute('aria-busy', 'false');
      rows.append(h('p', { class: 'error', role: 'alert' }, `Could not read the audit log: ${errorText(e)}`));
      if (e.status === 401) throw e;
    });
  await Promise.all([verify(), rowsPromise]);
}

/** Lines of a witness file (JSON lines with "checkpoint", or bare JWS) → JWS strings. */
export function parseCheckpoints(text) {
  const out = [];
  for (const raw of text.split(/\r?\n/)) {
    const line = raw.trim();
    if (!line) continue;
    if (line.startsWith('{')) {
      try {
        const obj = JSON.parse(line);
        out.push(typeof obj?.checkpoint === 'string' ? obj.checkpoint : line);
      } catch {
        out.push(line); // the broker reports it as malformed
      }
    } else {
      out.push(line);
    }
  }
  return out;
}

/** The newest stored checkpoint: row, time, whether the witness URL took it. */
function latestCheckpointSection() {
  const body = h('div', { id: 'latest-checkpoint', 'aria-live': 'polite', 'aria-busy': 'true' }, 'Loading…');
  api('GET', '/v1/admin/audit/checkpoints/latest')
    .then((answer) => {
      clear(body);
      const c = answer?.latest;
      if (!c) {
        add(body, h('p', { class: 'muted' }, 'No checkpoint yet: one is signed every audit.checkpoint_rows rows or checkpoint_interval, and at shutdown.'));
        return;
      }
      add(
        body,
        facts([
          ['Row', code(String(c.seq))],
          ['Signed', [time(c.signed_at), ` (${relative(c.signed_at)})`]],
          ['Witness URL', c.witnessed_at ? ['acknowledged ', time(c.witnessed_at)] : `not acknowledged (${c.witness_attempts} attempts; none if no witness_url is set)`],
        ]),
        h('p', { class: 'help' }, 'Read from the store, which a checkpoint is meant to check: compare with the copy a witness keeps (below).'),
      );
    })
    .catch((e) => {
      clear(body);
      add(body, h('p', { class: 'error' }, e.text || e.message));
    })
    .finally(() => body.removeAttribute('aria-busy'));
  return h('section', { 'aria-labelledby': 'latest-h' }, h('h2', { id: 'latest-h' }, 'Last checkpoint'), body);
}

function checkpointsSection(getHead) {
  const id = uid('checkpoints');
  const input = h('textarea', { id, name: 'checkpoints', rows: '4', spellcheck: 'false', 'aria-describedby': `${id}-help` });
  const button = h('button', { type: 'submit' }, 'Check checkpoints');
  const result = h('div', { 'aria-live': 'polite' });
  const form = h(
    'form',
    { class: 'checkpoints' },
    h('label', { for: id }, 'Checkpoints from a witness'),
    h(
      'p',
      { class: 'help', id: `${id}-help` },
      'The broker signs a checkpoint of the chain head every audit.checkpoint_rows rows or checkpoint_interval and sends it to the witnesses (the checkpoint file, stdout or a URL). Paste their lines here — JSON lines with a "checkpoint" field, or bare JWS; the last 100 are checked.',
    ),
    input,
    button,
  );
  form.addEventListener('submit', async (e) => {
    e.preventDefault();
    clear(result);
    let list = parseCheckpoints(input.value);
    if (!list.length) {
      result.append(h('p', { class: 'error' }, 'Paste at least one checkpoint line.'));
      return;
    }
    const dropped = Math.max(0, list.length - 100);
    list = list.slice(-100);
    button.disabled = true;
    try {
      const answer = await api('POST', '/v1/admin/audit/checkpoints/check', { body: { checkpoints: list } });
      const results = Array.isArray(answer?.results) ? answer.results : [];
      const bad = results.filter((r) => r.status !== 'matches');
      const matched = results.filter((r) => r.status === 'matches').map((r) => r.seq);
      const last = matched.length ? Math.max(...matched) : null;
      const headSeq = getHead()?.head_seq;
      const summary = [];
      if (dropped) summary.push(`${plural(dropped, 'older line')} not checked (at most 100 at a time). `);
      if (bad.length) {
        summary.push(`${plural(bad.length, 'checkpoint')} do not match: `, bad.map((r) => `row ${r.seq} ${r.status}`).join(', '), '. ');
      }
      if (last !== null) {
        summary.push(`Last matching checkpoint at row ${last}.`);
        if (typeof headSeq === 'number' && headSeq > last) {
          summary.push(` ${plural(headSeq - last, 'row')} after it (${last + 1}..${headSeq}) are not covered by a checkpoint yet.`);
        } else if (typeof headSeq === 'number') {
          summary.push(' It is at the head.');
        }
      }
      result.append(
        h('p', { class: bad.length ? 'error' : 'ok', id: 'checkpoint-status', role: bad.length ? 'alert' : null }, summary),
        table(plural(results.length, 'checkpoint'), ['Row', 'Status'], results.map((r) => [String(r.seq), code(r.status)])),
      );
    } catch (err) {
      result.append(h('p', { class: 'error', role: 'alert' }, `Could not check: ${errorText(err)}`));
    } finally {
      button.disabled = false;
    }
  });
  return h('section', { 'aria-labelledby': `${id}-h` }, h('h2', { id: `${id}-h` }, 'Checkpoints'), form, result);
}

// ---------------------------------------------------------------- revocations

export async function revocationsPage(section, ctx) {
  const stuck = ctx.params.get('stuck') === 'true';
  const only = h('input', { id: 'only-stuck', type: 'checkbox', name: 'stuck', checked: stuck ? true : null });
  only.addEventListener('change', () => ctx.navigate(ctx.hashFor('/revocations', { stuck: only.checked ? 'true' : '' })));
  const refresh = h('button', { type: 'button', class: 'secondary' }, 'Refresh');
  refresh.addEventListener('click', () => ctx.navigate(location.hash));
  section.append(
    h('h1', {}, 'Revocations'),
    h(
      'p',
      { class: 'lead' },
      'Downstream removals (a database user, cloud credentials…) the broker has not confirmed yet, oldest first. The lease is already revoked in the broker; these are retried with backoff, and one that failed 3 or more times is stuck.',
    ),
    h('div', { class: 'toolbar' }, h('span', { class: 'check' }, only, h('label', { for: 'only-stuck' }, 'Only stuck ones')), refresh),
  );

  const answer = await api('GET', '/v1/admin/leases', { query: { stuck: stuck ? 'true' : '', limit: 1000 } });
  if (!ctx.alive()) return;
  const list = Array.isArray(answer?.revocations) ? answer.revocations : [];
  if (!list.length) {
    section.append(h('p', { class: 'empty' }, stuck ? 'No revocation is stuck.' : 'No downstream removal is pending: every revoked lease is gone downstream.'));
    return;
  }
  section.append(
    table(
      `${plural(list.length, stuck ? 'stuck revocation' : 'pending revocation')}`,
      ['Lease', 'Backend', 'Downstream object', 'Run', 'Reason', 'Queued', 'Attempts', 'Next attempt', 'Stuck', 'Last error'],
      list.map((r) => [
        code(r.lease_id),
        code(r.backend),
        code(r.downstream_ref),
        runLink(r.run_id),
        code(r.reason),
        time(r.queued_at),
        String(r.attempts),
        [time(r.next_attempt_at), ` (${relative(r.next_attempt_at)})`],
        r.stuck ? h('span', { class: 'badge stuck' }, 'stuck') : 'no',
        r.last_error ? h('span', { class: 'detail' }, reveal(r.last_error).text) : null,
      ]),
    ),
  );
}
