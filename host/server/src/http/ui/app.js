// wfhost's web UI: a single page over the HTTP API (everything it does, the API does; it holds
// no state of its own but the token, kept for this tab in sessionStorage). No framework, no build
// step, nothing fetched from elsewhere: it works on a machine with no internet.
'use strict';

const PAGE = 50;            // workflows a page
const HISTORY_PAGE = 500;   // steps read and drawn at a time; more as the reader scrolls
const POLL_MS = 2000;       // how often a visible page looks for changes
const FOLD_BYTES = 2048;    // payloads longer than this start folded
const FETCH_MS = 90000;     // a call that takes longer is given up (the server's own limit is 60 s)
const CHILDREN = 1000;      // children listed a level of the tree
const COUNT_EVERY = 5;      // counts by id prefix (a range of the store) are read every this many refreshes

const ui = {
  token: sessionStorage.getItem('wfhost.token') || '',
  poll: null,     // the current page's refresh, called every POLL_MS while the tab is visible
  timer: null,
  waitingForToken: null,
  view: 0,        // bumped at each navigation: late answers for an old page are dropped
  busy: null,     // the view whose refresh is under way
  rendered: 0,    // the last view drawn whole once (see `rendered`)
  openTree: new Set(), // a workflow page's children tree: the ids of those shown open
  page: null,     // the page shown (the address without its query), to start a new one at its top
};

// The sticky header's height, for what is scrolled into view to stop below it (app.css): the
// header wraps to more lines on a narrow window.
(() => {
  const bar = document.querySelector('header.bar');
  if (!bar) return;
  const fit = () => document.documentElement.style.setProperty('--bar-height', (bar.offsetHeight + 8) + 'px');
  if (window.ResizeObserver) new ResizeObserver(fit).observe(bar);
  fit();
})();

// ---------------------------------------------------------------------------------------------
// The API

class ApiError extends Error {
  constructor(status, code, message) { super(message); this.status = status; this.code = code; }
}

async function api(path, options = {}) {
  const headers = Object.assign({ Accept: 'application/json' }, options.headers || {});
  if (ui.token) headers.Authorization = 'Bearer ' + ui.token;
  let response;
  try {
    const signal = AbortSignal.timeout ? AbortSignal.timeout(FETCH_MS) : undefined;
    response = await fetch(path, Object.assign({}, options, { headers, signal }));
  } catch (e) {
    setLive(false);
    throw new ApiError(0, 'unreachable', 'The server does not answer (' + e.message + '). The page tries again.');
  }
  setLive(true);
  const text = await response.text();
  let body = null;
  if (text && (!options.text || !response.ok)) { try { body = parseExact(text); } catch (_) { body = null; } }
  if (response.status === 401) {
    await askForToken(ui.token ? 'The server refused that token: give the right one.' : null);
    return api(path, options);
  }
  if (!response.ok) {
    const detail = body && body.error ? body.error : { code: String(response.status), message: text };
    throw new ApiError(response.status, detail.code, detail.message);
  }
  return options.text ? text : body;
}

function query(params) {
  const q = new URLSearchParams();
  for (const [k, v] of Object.entries(params)) {
    if (v !== undefined && v !== null && v !== '') q.set(k, String(v));
  }
  const s = q.toString();
  return s ? '?' + s : '';
}

const wf = (id) => '/v1/workflows/' + encodeURIComponent(id);

function askForToken(why) {
  if (ui.waitingForToken) return ui.waitingForToken;
  const dialog = document.getElementById('token-dialog');
  document.getElementById('token-why').textContent = why ||
    'Give the token the server was started with (WFHOST_TOKEN). It is kept for this browser tab only.';
  document.getElementById('token-why').className = why ? 'error' : '';
  const input = document.getElementById('token-input');
  input.value = '';
  // Esc would close the dialog and leave every call waiting for a token nobody can give: it is
  // kept open (a browser may close it anyway, when the page had no interaction yet; then it is
  // shown again).
  dialog.oncancel = (e) => e.preventDefault();
  dialog.onclose = () => { if (ui.waitingForToken && !dialog.open) dialog.showModal(); };
  ui.waitingForToken = new Promise((resolve) => {
    document.getElementById('token-form').onsubmit = (e) => {
      if (/[^\x21-\x7e]/.test(input.value.trim())) {
        // A header carries printable ASCII only: such a token is not the server's.
        e.preventDefault();
        document.getElementById('token-why').textContent = 'A token is printable ASCII without spaces: that is not one.';
        document.getElementById('token-why').className = 'error';
        return;
      }
      ui.token = input.value.trim();
      sessionStorage.setItem('wfhost.token', ui.token);
      ui.waitingForToken = null;
      resolve();
    };
  });
  if (!dialog.open) dialog.showModal();
  input.focus();
  return ui.waitingForToken;
}

function setLive(on) {
  const live = document.getElementById('live');
  live.className = 'live ' + (on ? 'on' : 'off');
  live.textContent = on ? 'live' : 'offline';
}

// ---------------------------------------------------------------------------------------------
// Small helpers

function esc(value) {
  return String(value).replace(/[&<>"']/g, (c) => ({ '&': '&amp;', '<': '&lt;', '>': '&gt;', '"': '&quot;', "'": '&#39;' }[c]));
}

function h(html) {
  const t = document.createElement('template');
  t.innerHTML = html.trim();
  return t.content;
}

// A time in the viewer's zone, the UTC value on hover.
function time(ms) {
  if (ms === null || ms === undefined) return '<span class="muted">-</span>';
  const d = new Date(ms);
  if (!Number.isFinite(d.getTime())) return '<span class="muted">never (' + esc(ms) + ' ms)</span>';
  return '<time datetime="' + d.toISOString() + '" title="' + d.toISOString().replace('T', ' ').replace('Z', ' UTC') + '">' +
    esc(d.toLocaleString()) + '</time>';
}

function duration(ms) {
  if (ms === null || ms === undefined) return '-';
  if (ms < 1000) return ms + ' ms';
  const s = ms / 1000;
  if (s < 60) return s.toFixed(s < 10 ? 2 : 1) + ' s';
  const m = Math.floor(s / 60);
  if (m < 60) return m + ' min ' + Math.round(s % 60) + ' s';
  const hrs = Math.floor(m / 60);
  if (hrs < 48) return hrs + ' h ' + (m % 60) + ' min';
  return Math.floor(hrs / 24) + ' d ' + (hrs % 24) + ' h';
}

function bytes(n) {
  if (n < 1024) return n + ' B';
  if (n < 1024 * 1024) return (n / 1024).toFixed(1) + ' KiB';
  return (n / 1024 / 1024).toFixed(1) + ' MiB';
}

// The statuses of a workflow that has not finished (the server says which: `paused` for one an
// operator holds, `damaged` for one whose journal cannot be read back).
const UNFINISHED = ['running', 'paused', 'damaged'];

function unfinished(w) {
  return UNFINISHED.includes(w.status);
}

function statusBadge(status) {
  return '<span class="status ' + esc(status) + '" data-status="' + esc(status) + '">' + esc(status) + '</span>';
}

// A payload, folded with its size when long.
function payload(value, encoding) {
  const text = value === undefined ? 'null' : JSON.stringify(value, null, 2);
  const size = new TextEncoder().encode(text).length;
  const label = (encoding ? encoding + ', ' : '') + bytes(size);
  if (size <= FOLD_BYTES) return '<pre class="payload">' + esc(text) + '</pre><span class="muted">' + esc(label) + '</span>';
  return '<details class="payload"><summary>' + esc(label) + ' (folded)</summary><pre>' + esc(text) + '</pre></details>';
}

function show(content) {
  const main = document.getElementById('main');
  main.replaceChildren(content);
}

function errorBox(error) {
  return '<div class="error" role="alert">' + esc(error.message) + '</div>';
}

// Marks a page drawn whole for the first time, once the browser has painted it: the
// `wfhost-rendered` performance mark (the time since the page began to load, as the UI's
// benchmark reads it) and `data-rendered` on the document.
function rendered(view, what) {
  if (ui.rendered === view || view !== ui.view) return;
  ui.rendered = view;
  requestAnimationFrame(() => setTimeout(() => {
    if (view !== ui.view) return;
    performance.mark('wfhost-rendered', { detail: what });
    document.documentElement.dataset.rendered = what;
  }, 0));
}

// Whether this browser gives a number's source text to `JSON.parse` (it then reads numbers
// past 2^53 exactly).
const EXACT_NUMBERS = (() => {
  let exact = false;
  JSON.parse('{"n":1}', function (key, value, context) { if (key === 'n') exact = !!(context && context.source); return value; });
  return exact;
})();

// JSON as the server wrote it, with every integer past 2^53 kept as its text (a store's workflow
// numbers may be that large, and JavaScript's numbers round there). What the page shows is read
// from fields, never found by searching the text: an input may hold anything.
function parseExact(text) {
  if (EXACT_NUMBERS) {
    return JSON.parse(text, function (key, value, context) {
      return typeof value === 'number' && !Number.isSafeInteger(value) && /^-?\d+$/.test(context.source) ? context.source : value;
    });
  }
  return exactJson(text);
}

// The same, for a browser that does not give `JSON.parse`'s reviver the source: a reader of
// JSON that keeps big integers as text.
function exactJson(text) {
  const NUMBER = /-?(?:0|[1-9]\d*)(\.\d+)?([eE][+-]?\d+)?/y;
  const WORD = /true|false|null/y;
  let at = 0;
  const fail = () => { throw new SyntaxError('not JSON at character ' + at); };
  const space = () => { while (at < text.length && ' \t\n\r'.includes(text[at])) at++; };
  const own = (object, key, value) => Object.defineProperty(object, key, { value, enumerable: true, writable: true, configurable: true });
  const string = () => {
    if (text[at] !== '"') fail();
    let end = at + 1;
    while (end < text.length && text[end] !== '"') end += text[end] === '\\' ? 2 : 1;
    if (end >= text.length) fail();
    const s = JSON.parse(text.slice(at, end + 1));
    at = end + 1;
    return s;
  };
  const value = () => {
    space();
    const c = text[at];
    if (c === '{') {
      at++; const object = {}; space();
      if (text[at] === '}') { at++; return object; }
      for (;;) {
        space(); const key = string(); space();
        if (text[at++] !== ':') fail();
        own(object, key, value()); space();
        const next = text[at++];
        if (next === '}') return object;
        if (next !== ',') fail();
      }
    }
    if (c === '[') {
      at++; const array = []; space();
      if (text[at] === ']') { at++; return array; }
      for (;;) {
        array.push(value()); space();
        const next = text[at++];
        if (next === ']') return array;
        if (next !== ',') fail();
      }
    }
    if (c === '"') return string();
    NUMBER.lastIndex = at;
    const number = NUMBER.exec(text);
    if (number) {
      at = NUMBER.lastIndex;
      const n = Number(number[0]);
      return !number[1] && !number[2] && !Number.isSafeInteger(n) ? number[0] : n;
    }
    WORD.lastIndex = at;
    const word = WORD.exec(text);
    if (!word) fail();
    at = WORD.lastIndex;
    return { true: true, false: false, null: null }[word[0]];
  };
  const result = value();
  space();
  if (at !== text.length) fail();
  return result;
}

function markNav(which) {
  for (const a of document.querySelectorAll('[data-nav]')) a.classList.toggle('current', a.dataset.nav === which);
}

// ---------------------------------------------------------------------------------------------
// Workflows: counts, filters, a page

const STATES = ['running', 'paused', 'damaged', 'completed', 'failed', 'cancelled'];

function listState() {
  const params = new URLSearchParams(location.hash.split('?')[1] || '');
  return {
    status: params.get('status') || '',
    entry: params.get('entry') || '',
    prefix: params.get('prefix') || '',
    after: params.get('after') || '',
  };
}

function listHash(s) {
  return '#/' + query({ status: s.status, entry: s.entry, prefix: s.prefix, after: s.after });
}

async function workflowsPage(view) {
  markNav('workflows');
  const s = listState();
  show(h(`
    <h1>Workflows</h1>
    <div class="counts" id="counts"></div>
    <form class="filters" id="filters">
      <label>Status <select name="status"><option value="">any</option>${STATES.map((x) =>
        `<option value="${x}" ${x === s.status ? 'selected' : ''}>${x}</option>`).join('')}</select></label>
      <label>Entry <input name="entry" value="${esc(s.entry)}" placeholder="any"></label>
      <label>Id starts with <input name="prefix" value="${esc(s.prefix)}" placeholder="any"></label>
      <button type="submit">Filter</button>
      <a href="#/">Clear</a>
    </form>
    <div id="rows"></div>`));
  document.getElementById('filters').addEventListener('submit', (e) => {
    e.preventDefault();
    const f = new FormData(e.target);
    location.hash = listHash({ status: f.get('status'), entry: f.get('entry').trim(), prefix: f.get('prefix').trim(), after: '' });
  });
  let counts = null;
  let polls = 0;
  ui.poll = async () => {
    // The counts read every workflow the filters leave: less often than the page, and apart
    // from it, so a slow count does not hold the rows back.
    const wantCounts = !s.prefix || polls++ % COUNT_EVERY === 0;
    const [countsAnswer, pageAnswer] = await Promise.allSettled([
      wantCounts ? api('/v1/workflow-counts' + query({ entry: s.entry, prefix: s.prefix })) : Promise.resolve(counts),
      api('/v1/workflows' + query({ status: s.status, entry: s.entry, prefix: s.prefix, after: s.after, limit: PAGE })),
    ]);
    if (view !== ui.view) return;
    if (countsAnswer.status === 'fulfilled' && countsAnswer.value) {
      counts = countsAnswer.value;
      renderCounts(counts, s);
    }
    if (pageAnswer.status === 'rejected') throw pageAnswer.reason;
    renderRows(pageAnswer.value, s, counts);
    if (counts || countsAnswer.status === 'rejected') rendered(view, 'workflows');
  };
  await refresh();
}

function renderCounts(counts, s) {
  const total = STATES.reduce((n, x) => n + (counts[x] || 0), 0);
  const box = (label, n, status) => `<a class="count ${s.status === status ? 'current' : ''}" data-count="${status || 'all'}"
      href="${listHash(Object.assign({}, s, { status, after: '' }))}"><b>${n.toLocaleString()}</b>${label}</a>`;
  document.getElementById('counts').replaceChildren(h(box('all', total, '') + STATES.map((x) => box(x, counts[x] || 0, x)).join('')));
}

function renderRows(page, s, counts) {
  const rows = document.getElementById('rows');
  const total = counts ? STATES.reduce((n, x) => n + (counts[x] || 0), 0) : page.workflows.length;
  if (total === 0 && !s.entry && !s.prefix && !s.status && !s.after) {
    rows.replaceChildren(h(`<div class="empty"><h2>No workflows yet</h2>
      <p>Start one from a checkout of wfhost with the CLI (it uploads the module first; with the
      server's token in <code>WFHOST_TOKEN</code> when it has one):</p>
      <pre>wfhost start --server ${esc(location.origin)} examples/hello greet --input '"you"'</pre>
      <p>or with the HTTP API: <code>POST /v1/modules</code> with the <code>.wasm</code> bytes, then
      <code>POST /v1/workflows</code> with <code>{"module": "&lt;its hash&gt;", "entry": "greet", "input": "you"}</code>.</p>
      <p class="muted">It shows here as soon as it starts.</p></div>`));
    return;
  }
  if (page.workflows.length === 0) {
    rows.replaceChildren(h('<p class="notice">No workflow matches.</p>'));
    return;
  }
  const now = Date.now();
  const body = page.workflows.map((w) => `<tr data-id="${esc(w.id)}">
      <td><a href="#/w/${encodeURIComponent(w.id)}">${esc(w.id)}</a></td>
      <td>${esc(w.entry)}</td>
      <td>${statusBadge(w.status)}${w.cancel_asked && unfinished(w) ? ' <span class="muted">cancel asked</span>' : ''}</td>
      <td class="wide">${time(w.started)}</td>
      <td class="num">${duration((w.finished || now) - w.started)}</td>
      <td class="num" data-steps>${w.steps}</td>
      <td class="wide">${w.host ? esc(w.host) : (w.waiting_for_host ? '<span class="muted">waiting for a host</span>' : '<span class="muted">-</span>')}</td>
    </tr>`).join('');
  const pager = `<div class="pager">
      ${s.after ? `<a href="${listHash(Object.assign({}, s, { after: '' }))}">First page</a>` : ''}
      ${page.next ? `<a id="next-page" href="${listHash(Object.assign({}, s, { after: page.next }))}">Next page</a>` : '<span class="muted">End of the list</span>'}
    </div>`;
  rows.replaceChildren(h(`<table class="workflows"><thead><tr><th>Id</th><th>Entry</th><th>Status</th>
      <th class="wide">Started</th><th>Duration</th><th>Steps</th><th class="wide">Host</th></tr></thead>
      <tbody>${body}</tbody></table>${pager}`));
}

// ---------------------------------------------------------------------------------------------
// One workflow: facts, where it waits, its timeline, its children, send and cancel

async function workflowPage(view, id) {
  markNav('workflows');
  show(h(`<h1 id="title">${esc(id)}</h1><div id="facts"></div>
    <div class="split">
      <section class="panel"><h2>Send a message</h2>
        <form id="send"><textarea id="message" aria-label="Message (JSON)" spellcheck="false">{}</textarea>
        <div class="actions"><button id="send-button" type="submit">Send</button><span id="send-state" class="muted"></span></div></form></section>
      <section class="panel"><h2>Pause or cancel</h2>
        <p class="muted">A paused workflow takes no step until it is unpaused: what reaches it meanwhile waits.</p>
        <div class="actions"><button id="pause-button" type="button">Pause</button><span id="pause-state" class="muted"></span></div>
        <p class="muted">A cancelled workflow is told to stop; it may clean up before it ends.</p>
        <div class="actions"><button id="cancel-button" class="danger" type="button">Cancel this workflow</button><span id="cancel-state" class="muted"></span></div></section>
      <section class="panel"><h2>Upgrade</h2>
        <p class="muted">New code for this workflow: its journal is replayed against the new module first, and it switches only if every step is the same.</p>
        <form id="upgrade"><input id="upgrade-file" type="file" accept=".wasm,application/wasm" aria-label="The new module (.wasm)">
        <div class="actions"><button id="upgrade-button" type="submit">Upgrade</button><span id="upgrade-state" class="muted"></span></div></form></section>
      <section class="panel"><h2>Reset</h2>
        <p class="muted">Once it has finished: a new run keeps its journal up to a step and goes on from there. What it did after that step is done again; the run before is kept.</p>
        <form id="reset"><label>Keep steps up to <input id="reset-step" type="number" min="0" placeholder="before the failure" aria-label="The last step kept"></label>
        <input id="reset-file" type="file" accept=".wasm,application/wasm" aria-label="Fixed code (.wasm, optional)">
        <div class="actions"><button id="reset-button" class="danger" type="submit" disabled>Reset</button><span id="reset-state" class="muted"></span></div></form></section>
    </div>
    <h2>Children</h2><div id="children"><span class="muted">-</span></div>
    <h2>History <span id="step-count" class="muted"></span></h2><div id="waits"></div><ol class="timeline" id="timeline"></ol><div id="more-steps"></div>`));
  const message = document.getElementById('message');
  const sendButton = document.getElementById('send-button');
  message.addEventListener('input', () => {
    try { JSON.parse(message.value); message.classList.remove('invalid'); sendButton.disabled = ui.finished === true; document.getElementById('send-state').textContent = ''; }
    catch (e) { message.classList.add('invalid'); sendButton.disabled = true; document.getElementById('send-state').textContent = 'Not JSON: ' + e.message; }
  });
  document.getElementById('send').addEventListener('submit', async (e) => {
    e.preventDefault();
    const state = document.getElementById('send-state');
    try {
      const sent = await api(wf(id) + '/messages', { method: 'POST', headers: { 'Content-Type': 'application/json' }, body: message.value });
      state.textContent = 'Sent (message ' + sent.message + ').';
    } catch (error) { state.textContent = error.message; }
  });
  document.getElementById('pause-button').addEventListener('click', async () => {
    const state = document.getElementById('pause-state');
    const verb = ui.paused ? 'unpause' : 'pause';
    try {
      const answer = await api(wf(id) + '/' + verb, { method: 'POST' });
      state.textContent = { done: verb === 'pause' ? 'Paused.' : 'Unpaused.', already: 'It was so already.', ended: 'It had already ended (' + answer.status + ').' }[answer.pause] || answer.pause;
      await refresh();
    } catch (error) { state.textContent = error.message; }
  });
  document.getElementById('upgrade').addEventListener('submit', async (e) => {
    e.preventDefault();
    const state = document.getElementById('upgrade-state');
    const file = document.getElementById('upgrade-file').files[0];
    if (!file) { state.textContent = 'Choose the new module (a .wasm file) first.'; return; }
    state.textContent = 'Replaying its journal against ' + file.name + '…';
    try {
      const stored = await api('/v1/modules', { method: 'POST', headers: { 'Content-Type': 'application/wasm' }, body: await file.arrayBuffer() });
      const done = await api(wf(id) + '/upgrade', { method: 'POST', headers: { 'Content-Type': 'application/json' }, body: JSON.stringify({ module: stored.hash }) });
      state.textContent = done.already ? 'It runs that module already.'
        : 'Upgraded: ' + done.steps + ' step(s) replayed the same; it runs ' + done.to.slice(0, 16) + '… now.';
      await refresh();
    } catch (error) { state.textContent = 'Not upgraded: ' + error.message; }
  });
  document.getElementById('reset').addEventListener('submit', async (e) => {
    e.preventDefault();
    const state = document.getElementById('reset-state');
    const step = document.getElementById('reset-step').value;
    const file = document.getElementById('reset-file').files[0];
    const where = step === '' ? 'the step before the one that failed it' : 'step ' + step;
    if (!confirm('Reset workflow ' + id + ' to ' + where + (file ? ', with ' + file.name : '') + '? A new run goes on from there: what it did after that step is done again.')) return;
    state.textContent = 'Resetting…';
    try {
      const request = {};
      if (step !== '') request.to_step = Number(step);
      if (file) {
        const stored = await api('/v1/modules', { method: 'POST', headers: { 'Content-Type': 'application/wasm' }, body: await file.arrayBuffer() });
        request.module = stored.hash;
      }
      const done = await api(wf(id) + '/reset', { method: 'POST', headers: { 'Content-Type': 'application/json' }, body: JSON.stringify(request) });
      state.replaceChildren(h(`<span>Run ${done.run} keeps ${done.steps} step(s) and goes on; the run before is <a href="#/w/${encodeURIComponent(done.previous)}">${esc(done.previous)}</a>.</span>`));
      await refresh();
    } catch (error) { state.textContent = 'Not reset: ' + error.message; }
  });
  document.getElementById('cancel-button').addEventListener('click', async () => {
    if (!confirm('Cancel workflow ' + id + '?')) return;
    const state = document.getElementById('cancel-state');
    try {
      const cancel = await api(wf(id) + '/cancel', { method: 'POST' });
      state.textContent = { asked: 'Cancel asked.', asked_before: 'A cancel was asked before.', ended: 'It had already ended (' + cancel.status + ').' }[cancel.cancel] || cancel.cancel;
      await refresh();
    } catch (error) { state.textContent = error.message; }
  });
  // `budget`: how many more steps to read (a page at a time); the reader asks for more by
  // scrolling to the end of the timeline (or with its button), so a long history is never
  // read whole unasked. What the workflow waits for the server works out from its journal.
  const history = { steps: [], budget: HISTORY_PAGE, shown: '', children: null, childrenSettled: false, waitsAt: -1 };
  ui.openTree = new Set();
  ui.poll = async () => {
    const text = await api(wf(id), { text: true });
    if (view !== ui.view) return;
    const w = parseExact(text);
    // Numbers as the server wrote them (`parseExact`).
    w.numberText = String(w.number);
    w.parentText = w.parent === null || w.parent === undefined ? null : String(w.parent);
    // Redrawn only when something changed: a folded payload the reader opened stays open.
    if (text !== history.shown) { renderFacts(w); history.shown = text; }
    // Read while it runs, and once more after it ended (its children's last statuses).
    if (unfinished(w) || !history.childrenSettled) {
      const children = await api('/v1/workflows' + query({ parent: w.numberText, limit: CHILDREN }), { text: true });
      if (view !== ui.view) return;
      if (children !== history.children) renderChildren(document.getElementById('children'), children);
      history.children = children;
      history.childrenSettled = !unfinished(w);
    }
    // The steps journaled since the last look, after the last one shown. (A history cursor is
    // `c` and the step's number in hex: this page ships with the server that makes them.)
    while (history.steps.length < w.steps && history.budget > 0) {
      const last = history.steps[history.steps.length - 1];
      const after = last ? 'c' + last.step.toString(16) : undefined;
      const limit = Math.min(HISTORY_PAGE, history.budget);
      const page = await api(wf(id) + '/history' + query({ after, limit }));
      if (view !== ui.view) return;
      if (page.steps.length === 0) break;
      history.budget -= page.steps.length;
      history.steps.push(...page.steps);
      appendSteps(page.steps, history.steps.length - page.steps.length);
    }
    const more = w.steps - history.steps.length;
    document.getElementById('step-count').textContent = '(' + w.steps.toLocaleString() + ' steps' +
      (more > 0 ? ', the first ' + history.steps.length.toLocaleString() + ' shown' : '') + ')';
    const moreBox = document.getElementById('more-steps');
    if (more > 0 && history.budget <= 0 && !moreBox.firstChild) {
      moreBox.replaceChildren(h('<button type="button" id="more-steps-button">Show ' +
        Math.min(more, HISTORY_PAGE).toLocaleString() + ' more steps</button>'));
      const button = document.getElementById('more-steps-button');
      const readMore = () => { history.budget = HISTORY_PAGE; moreBox.replaceChildren(); refresh(); };
      button.addEventListener('click', readMore);
      // Scrolling to the end of the timeline reads the next steps too.
      if (window.IntersectionObserver) {
        const seen = new IntersectionObserver((entries) => {
          if (entries.some((e) => e.isIntersecting) && button.isConnected) { seen.disconnect(); readMore(); }
        });
        seen.observe(button);
      }
    }
    if (!unfinished(w)) renderWaits(w, null);
    else if (history.waitsAt !== w.steps) {
      const waits = await api(wf(id) + '/waits');
      if (view !== ui.view) return;
      history.waitsAt = w.steps;
      renderWaits(w, waits);
    }
    rendered(view, 'workflow');
  };
  try { await refresh(); } catch (error) {
    if (view !== ui.view) return;
    if (error.code === 'unknown_workflow') { show(h('<h1>' + esc(id) + '</h1>' + errorBox(error) + '<p><a href="#/">All workflows</a></p>')); ui.poll = null; return; }
    throw error;
  }
}

function renderFacts(w) {
  const ended = w.finished ? time(w.finished) + ' (' + duration(w.finished - w.started) + ')' : '<span class="muted">not yet</span>';
  let outcome = '';
  if (w.error) outcome = `<dt>Error</dt><dd><span class="error-kind"><b>${esc(w.error.kind)}</b></span>: ${esc(w.error.message)}</dd>`;
  else if (w.result !== undefined) outcome = `<dt>Result</dt><dd id="result">${payload(w.result, w.result_encoding)}</dd>`;
  document.getElementById('facts').replaceChildren(h(`<dl class="facts">
    <dt>Status</dt><dd id="status">${statusBadge(w.status)}${w.cancel_asked && unfinished(w) ? ' <span class="muted">cancel asked</span>' : ''}</dd>
    <dt>Entry</dt><dd>${esc(w.entry)}</dd>
    <dt>Module</dt><dd>${esc(w.module_name)} <span class="mono muted" title="SHA-256">${esc(w.module.slice(0, 16))}…</span></dd>
    <dt>Number</dt><dd id="number">${esc(w.numberText)}${w.parentText ? ' (child of ' + esc(w.parentText) + ')' : ''}</dd>
    <dt>Started</dt><dd>${time(w.started)}</dd>
    <dt>Ended</dt><dd>${ended}</dd>
    <dt>Host</dt><dd>${w.host ? esc(w.host) : (w.waiting_for_host ? 'waiting for a host' : '-')}</dd>
    ${runFacts(w)}
    <dt>Unread messages</dt><dd>${w.unread_messages}</dd>
    ${w.damaged ? `<dt>Damaged</dt><dd class="error">${esc(w.damaged)}</dd>` : ''}
    <dt>Input</dt><dd>${payload(w.input, w.input_encoding)}</dd>
    ${outcome}</dl>`));
  ui.finished = !unfinished(w);
  ui.paused = w.paused === true;
  const pause = document.getElementById('pause-button');
  if (pause) pause.textContent = ui.paused ? 'Unpause' : 'Pause';
  for (const b of [document.getElementById('cancel-button'), document.getElementById('send-button'), pause, document.getElementById('upgrade-button')]) {
    if (b && ui.finished) b.disabled = true;
  }
  // Only a finished top-level workflow is reset (not a run a reset ended: its id has '/').
  const reset = document.getElementById('reset-button');
  if (reset) reset.disabled = !ui.finished || w.parentText !== null || w.id.includes("/");
}

// The runs of a workflow's id: which this is, and links to the others.
function runFacts(w) {
  const past = /^(.*)\/run-(\d+)$/.exec(w.id);
  if (past && w.parentText === null) {
    return `<dt>Run</dt><dd>${esc(past[2])}, ended by a reset: the id runs on as <a href="#/w/${encodeURIComponent(past[1])}">${esc(past[1])}</a></dd>`;
  }
  if (!(w.run > 1)) return '';
  const before = [];
  for (let run = 1; run < w.run; run++) {
    const id = w.id + '/run-' + run;
    before.push(`<a href="#/w/${encodeURIComponent(id)}">${esc(id)}</a>`);
  }
  return `<dt>Run</dt><dd>${w.run} (after a reset; the runs before: ${before.join(', ')})</dd>`;
}

function words(item) {
  if (typeof item === 'string') return item;
  return item.words || [item.tag !== undefined ? '#' + item.tag : '', item.kind || ''].filter(Boolean).join(' ');
}

// What an open yield waits for, in words, from its fields (`wfhost history --json`'s).
function waitWords(wait) {
  const y = wait.yielded;
  switch (y.kind) {
    case 'sleep':
    case 'sleep-until': return 'a timer, firing ' + time(wait.fires_at) + ' <span class="muted">(' + esc(words(y)) + ')</span>';
    case 'join': return 'child &lt;' + esc(y.target) + '&gt; to end <span class="muted">(' + esc(words(y)) + ')</span>';
    case 'call': return 'the host function <b>' + esc(y.name) + '</b> to answer';
    case 'retry': return 'the host function <b>' + esc(y.name) + '</b> to answer (attempt ' + esc(y.attempt) + ')';
    default: return esc(words(y));
  }
}

function appendSteps(steps, first) {
  const list = document.getElementById('timeline');
  const html = steps.map((s, i) => `<li data-step="${s.step}">
      <div class="head"><b>Step ${s.step}</b> ${time(s.at)}
        ${s.after_ms !== null && s.after_ms !== undefined ? `<span class="gap">+${duration(s.after_ms)} after the step before</span>` : ''}
        <span class="muted">${esc(typeof s.status === 'string' ? s.status : Object.keys(s.status)[0])}</span></div>
      <ul class="lane">
        ${s.events.map((e) => `<li class="in" title="event in">${esc(words(e))}</li>`).join('')}
        ${s.reads.map((r) => `<li class="read" title="WASI read">${esc(r)}</li>`).join('')}
        ${s.yields.map((y) => `<li class="out" title="yield out">${esc(words(y))}</li>`).join('')}
      </ul></li>`).join('');
  if (first === 0) list.replaceChildren(h(html)); else list.append(h(html));
}

// Where a running workflow waits (`GET .../waits`: the yields no event has answered yet).
function renderWaits(w, waits) {
  const box = document.getElementById('waits');
  if (!unfinished(w) || !waits) { box.replaceChildren(); return; }
  const items = waits.waits.map((x) => '<li data-waits="' + esc(x.yielded.kind) + '">' + waitWords(x) +
    (x.unserved ? ' <span class="error" data-unserved>(' + esc(x.unserved) + ')</span>' : '') + '</li>');
  if (waits.message) items.push('<li data-waits="message">a message</li>');
  box.replaceChildren(h(items.length
    ? '<div class="waits"><b>Waits for</b><ul>' + items.join('') + '</ul></div>'
    : '<div class="waits"><b>Runnable</b>: it waits for its turn (or its host).</div>'));
}

// A workflow's children as a tree: each child opens to its own children, read when opened.
// What the reader opened stays open, at every depth, when the tree is redrawn (`ui.openTree`,
// the ids of the workflows whose children show).
function renderChildren(box, text) {
  const page = parseExact(text);
  if (page.workflows.length === 0) { box.replaceChildren(h('<span class="muted">none</span>')); return; }
  box.replaceChildren(h('<ul class="tree">' + page.workflows.map((c) =>
    `<li data-child="${esc(c.id)}"><details data-parent="${esc(String(c.number))}" data-id="${esc(c.id)}"><summary><a href="#/w/${encodeURIComponent(c.id)}">${esc(c.id)}</a>
      ${statusBadge(c.status)} <span class="muted">${esc(c.entry)}, ${c.steps} steps</span></summary>
      <div class="subtree"><span class="muted">reading its children…</span></div></details></li>`).join('') +
    (page.next ? `<li class="muted">and more (the first ${CHILDREN} shown)</li>` : '') + '</ul>'));
  for (const d of box.querySelectorAll(':scope > ul > li > details')) {
    d.addEventListener('toggle', () => {
      if (d.open) ui.openTree.add(d.dataset.id); else ui.openTree.delete(d.dataset.id);
      openChildren(d);
    });
    if (ui.openTree.has(d.dataset.id)) d.open = true;
  }
}

async function openChildren(details) {
  if (!details.open || details.dataset.read) return;
  details.dataset.read = 'yes';
  const box = details.querySelector('.subtree');
  try {
    const parent = details.dataset.parent;
    renderChildren(box, await api('/v1/workflows' + query({ parent, limit: CHILDREN }), { text: true }));
  } catch (error) {
    delete details.dataset.read;
    box.replaceChildren(h(errorBox(error)));
  }
}

// ---------------------------------------------------------------------------------------------
// Workers: who serves each worker function, and the tasks waiting for one

// A duration in milliseconds as people say it.
function ago(ms) {
  if (ms < 1000) return ms + ' ms';
  if (ms < 60000) return (ms / 1000).toFixed(1) + ' s';
  return Math.floor(ms / 60000) + ' min ' + String(Math.floor((ms % 60000) / 1000)).padStart(2, '0') + ' s';
}

async function workersPage(view) {
  markNav('workers');
  show(h('<h1>Workers</h1><div id="workers"></div>'));
  ui.poll = async () => {
    let answer;
    try { answer = await api('/v1/workers'); } catch (error) {
      if (view !== ui.view) return;
      document.getElementById('workers').replaceChildren(h(error.status === 404
        ? '<p class="muted">This server serves no worker functions (<code>--worker-function NAME</code>).</p>'
        : errorBox(error)));
      return;
    }
    if (view !== ui.view) return;
    const now = Date.now();
    const rows = answer.functions.map((f) => {
      const pollers = f.pollers.length === 0
        ? `<span class="${f.waiting ? 'error-kind' : 'muted'}">no worker polls for it</span>`
        : f.pollers.map((p) => `<div data-poller="${esc(p.name)}">${esc(p.name)} <span class="muted">on ${esc(p.host)}, ${p.polling ? 'polling now' : 'last poll ' + ago(now - p.last_poll_ms) + ' ago'}</span></div>`).join('');
      return `<tr data-function="${esc(f.function)}"><td>${esc(f.function)}</td><td class="num" data-waiting>${f.waiting}</td>
        <td class="wide">${f.oldest_waiting_ms == null ? '<span class="muted">-</span>' : ago(f.oldest_waiting_ms)}</td>
        <td class="num" data-in-flight>${f.in_flight}</td><td class="num">${f.completed}</td><td class="num">${f.failed}</td><td>${pollers}</td></tr>`;
    }).join('');
    document.getElementById('workers').replaceChildren(h(answer.functions.length
      ? `<table class="workflows"><thead><tr><th>Function</th><th>Waiting</th><th class="wide">Oldest waiting</th><th>In flight</th><th>Completed</th><th>Failed</th><th>Workers</th></tr></thead><tbody>${rows}</tbody></table>`
      : '<p class="muted">No worker functions.</p>'));
  };
  await refresh();
}

// ---------------------------------------------------------------------------------------------
// Modules: what the store keeps, with the names and versions they were deployed under

async function modulesPage(view) {
  markNav('modules');
  show(h('<h1>Modules</h1><p class="muted">Deployed under a name (<code>wfhost deploy SOURCE --name NAME</code>), a module is that name\'s next version: a start names it <code>NAME</code> (the latest) or <code>NAME@VERSION</code>.</p><div id="modules"></div>'));
  ui.poll = async () => {
    const answer = await api('/v1/modules');
    if (view !== ui.view) return;
    const named = (m) => (m.names || []).map((n) => n.name + '@' + n.version);
    const modules = answer.modules.slice().sort((a, b) => {
      const [x, y] = [named(a)[0] || '~' + a.hash, named(b)[0] || '~' + b.hash];
      return x < y ? -1 : x > y ? 1 : 0;
    });
    const rows = modules.map((m) => `<tr data-module="${esc(m.hash)}">
      <td data-names>${named(m).length ? named(m).map(esc).join(', ') : '<span class="muted">-</span>'}</td>
      <td class="mono" title="SHA-256">${esc(m.hash.slice(0, 16))}…</td>
      <td class="num wide">${bytes(m.size)}</td><td>${m.entry_points.map(esc).join(', ')}</td></tr>`).join('');
    document.getElementById('modules').replaceChildren(h(modules.length
      ? `<table class="workflows"><thead><tr><th>Names</th><th>Module</th><th class="wide">Size</th><th>Entry points</th></tr></thead><tbody>${rows}</tbody></table>`
      : '<p class="muted">The store keeps no modules yet.</p>'));
  };
  await refresh();
}

// ---------------------------------------------------------------------------------------------
// Hosts, and the store's figures from the metrics

async function hostsPage(view) {
  markNav('hosts');
  show(h(`<h1>Hosts</h1><div id="hosts"></div><h2>Store and journal</h2><div id="figures"></div>
    <h2>Retention</h2>
    <form class="filters" id="prune">
      <label>Finished more than <input name="older" value="30d" size="6" aria-label="Age"> ago</label>
      <label>Status <select name="status"><option value="">any</option>${['completed', 'failed', 'cancelled'].map((x) =>
        `<option value="${x}">${x}</option>`).join('')}</select></label>
      <button type="submit" class="danger" id="prune-button">Remove them</button>
    </form>
    <p class="muted">Removes finished top-level workflows with their whole trees, their histories, messages and modules nothing else uses (a tree part of which still runs is kept). It cannot be undone.</p>
    <p id="prune-state" class="muted"></p>`));
  document.getElementById('prune').addEventListener('submit', async (e) => {
    e.preventDefault();
    const f = new FormData(e.target);
    const older = String(f.get('older')).trim();
    const status = f.get('status') || undefined;
    const state = document.getElementById('prune-state');
    if (!/^\d+(ms|s|m|h|d)$/.test(older)) { state.textContent = 'Not an age: write e.g. 30d, 12h or 90m.'; return; }
    if (!confirm('Remove the ' + (status || 'finished') + ' workflows that finished more than ' + older + ' ago?')) return;
    state.textContent = 'Removing…';
    try {
      let request = { older_than: older, status };
      const total = { trees: 0, workflows: 0, left: 0 };
      for (;;) {
        const answer = await api('/v1/prune', { method: 'POST', headers: { 'Content-Type': 'application/json' }, body: JSON.stringify(request) });
        total.trees += answer.trees; total.workflows += answer.workflows; total.left = answer.left;
        if (!answer.more) break;
        request = { finished_before: answer.finished_before, status };
        state.textContent = 'Removing… ' + total.workflows.toLocaleString() + ' so far';
      }
      state.textContent = 'Removed ' + total.workflows.toLocaleString() + ' workflow(s) (' + total.trees.toLocaleString() +
        ' top-level, with their trees).' + (total.left ? ' Kept ' + total.left.toLocaleString() + ' whose tree still runs in part.' : '');
      state.dataset.pruned = String(total.workflows);
    } catch (error) { state.textContent = error.message; }
  });
  let last = null;
  ui.poll = async () => {
    const [hosts, metrics] = await Promise.all([api('/v1/hosts'), api('/metrics', { headers: { Accept: 'text/plain' }, text: true }).catch((e) => e)]);
    if (view !== ui.view) return;
    document.getElementById('hosts').replaceChildren(h(hosts.hosts.length === 0 ? '<p class="notice">No host holds this store.</p>' :
      `<table><thead><tr><th>Host</th><th>Name</th><th>Alive</th><th>Lease until</th><th>Workflows</th></tr></thead><tbody>${
        hosts.hosts.map((x) => `<tr data-host="${esc(x.id)}"><td>${esc(x.id)}${x.this ? ' <span class="muted">(this one)</span>' : ''}</td><td>${esc(x.name)}</td>
          <td>${x.alive ? 'yes' : '<b class="error-kind">no</b>'}</td><td>${time(x.lease_until)}</td><td class="num">${x.workflows}</td></tr>`).join('')}</tbody></table>`));
    const figures = document.getElementById('figures');
    if (metrics instanceof Error) { figures.replaceChildren(h('<p class="muted">This server gives no metrics (' + esc(metrics.message) + ').</p>')); return; }
    const now = { at: Date.now(), m: parseMetrics(metrics) };
    figures.replaceChildren(h(journalFigures(last, now)));
    last = now;
  };
  await refresh();
}

// The Prometheus text format, as sums by metric name (labels summed over).
function parseMetrics(text) {
  const sums = {};
  for (const line of String(text).split('\n')) {
    if (!line || line[0] === '#') continue;
    const m = line.match(/^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{[^}]*\})?\s+(\S+)/);
    if (m) sums[m[1]] = (sums[m[1]] || 0) + Number(m[3]);
  }
  return sums;
}

function journalFigures(before, now) {
  const m = now.m;
  const commits = m.wfhost_journal_commits_total ?? m.wfhost_journal_commits;
  const rows = [
    ['Workflows running', m.wfhost_workflows_running, 'running'],
    ['Commits', commits, 'commits'],
    ['Steps a commit (mean)', ratio(m.wfhost_journal_steps_per_commit_sum, m.wfhost_journal_steps_per_commit_count), 'steps-per-commit'],
    ['Commit latency (mean)', ms(ratio(m.wfhost_journal_commit_duration_seconds_sum, m.wfhost_journal_commit_duration_seconds_count)), 'commit-latency'],
    ['Commit failures', m.wfhost_journal_commit_failures_total ?? m.wfhost_journal_commit_failures, 'commit-failures'],
  ];
  if (before) {
    const was = before.m.wfhost_journal_commits_total ?? before.m.wfhost_journal_commits;
    const secs = (now.at - before.at) / 1000;
    if (commits !== undefined && was !== undefined && secs > 0) rows.splice(2, 0, ['Commits a second', ((commits - was) / secs).toFixed(1), 'commits-per-second']);
  }
  return '<dl class="facts">' + rows.map(([k, v, key]) => `<dt>${esc(k)}</dt><dd data-figure="${key}">${v === undefined || v === null || Number.isNaN(v) ? '<span class="muted">-</span>' : esc(typeof v === 'number' ? +v.toFixed(3) : v)}</dd>`).join('') + '</dl>';
}

function ratio(a, b) { return a !== undefined && b ? a / b : undefined; }
function ms(seconds) { return seconds === undefined ? undefined : (seconds * 1000).toFixed(2) + ' ms'; }

// ---------------------------------------------------------------------------------------------
// Schedules: each firing starts workflow <id>@<its time>, once across hosts

async function schedulesPage(view) {
  markNav('schedules');
  show(h(`<h1>Schedules</h1><div id="schedules"></div>
    <h2>New schedule</h2>
    <form class="filters" id="new-schedule" autocomplete="off">
      <label>Id <input name="id" required size="14" aria-label="Schedule id"></label>
      <label>Module <input name="module" type="file" accept=".wasm,application/wasm" required aria-label="Module (.wasm)"></label>
      <label>Entry <input name="entry" required size="10" aria-label="Entry point"></label>
      <label>Cron <input name="cron" size="16" placeholder="0 */5 * * * *" aria-label="Cron expression, seconds first"></label>
      <label>or every <input name="every" size="5" placeholder="10m" aria-label="Interval"></label>
      <label>Zone <input name="zone" size="12" value="UTC" aria-label="Time zone"></label>
      <label>Input <input name="input" size="10" value="null" aria-label="Input (JSON)"></label>
      <label>Overlap <select name="overlap">${['skip', 'buffer-one', 'allow-all'].map((x) => `<option>${x}</option>`).join('')}</select></label>
      <label>Catch-up <input name="catch_up" size="6" value="skip" aria-label="Catch-up policy (skip, last, all:N)"></label>
      <button type="submit" id="create-schedule">Create</button>
    </form>
    <p id="schedule-state" class="muted">Each firing starts a workflow whose id is the schedule's and the firing's time, once however many hosts serve the store.</p>`));
  const state = document.getElementById('schedule-state');
  document.getElementById('new-schedule').addEventListener('submit', async (e) => {
    e.preventDefault();
    const f = new FormData(e.target);
    const cron = String(f.get('cron')).trim(), every = String(f.get('every')).trim();
    if (!cron === !every) { state.textContent = 'Say when it fires: a cron expression or an interval, one of them.'; return; }
    let input;
    try { input = JSON.parse(String(f.get('input'))); } catch (error) { state.textContent = 'The input is not JSON: ' + error.message; return; }
    try {
      const stored = await api('/v1/modules', { method: 'POST', headers: { 'Content-Type': 'application/wasm' }, body: await f.get('module').arrayBuffer() });
      const request = { id: String(f.get('id')).trim(), module: stored.hash, entry: String(f.get('entry')).trim(), input,
        overlap: f.get('overlap'), catch_up: String(f.get('catch_up')).trim() };
      if (cron) { request.cron = cron; request.time_zone = String(f.get('zone')).trim() || 'UTC'; } else request.every = every;
      const created = await api('/v1/schedules', { method: 'POST', headers: { 'Content-Type': 'application/json' }, body: JSON.stringify(request) });
      state.textContent = 'Created ' + created.id + ': ' + created.when + (created.next_fire ? ', next at ' + new Date(created.next_fire).toLocaleString() : '') + '.';
      await refresh();
    } catch (error) { state.textContent = error.message; }
  });
  document.getElementById('schedules').addEventListener('click', async (e) => {
    const button = e.target.closest('button[data-act]');
    if (!button) return;
    const id = button.dataset.id, act = button.dataset.act;
    if (act === 'delete' && !confirm('Delete schedule ' + id + '? The workflows it started stay.')) return;
    const path = '/v1/schedules/' + encodeURIComponent(id);
    try {
      if (act === 'delete') await api(path, { method: 'DELETE' });
      else {
        const answer = await api(path + '/' + act, { method: 'POST' });
        if (act === 'trigger') state.textContent = 'Started ' + answer.workflow.id + '.';
      }
      await refresh();
    } catch (error) { state.textContent = error.message; }
  });
  ui.poll = async () => {
    const list = await api('/v1/schedules');
    if (view !== ui.view) return;
    const rows = list.schedules.map((s) => `<tr data-schedule="${esc(s.id)}">
      <td>${esc(s.id)}</td><td>${esc(s.when)}</td>
      <td data-state>${s.paused ? 'paused' : 'active'}</td>
      <td class="wide">${s.next_fire ? time(s.next_fire) : '<span class="muted">never</span>'}</td>
      <td class="num" data-fired>${s.fired}</td>
      <td>${s.last_workflow ? `<a href="#/w/${encodeURIComponent(s.last_workflow)}">${esc(s.last_workflow)}</a>` : '<span class="muted">-</span>'}</td>
      <td>${esc(s.entry)}</td><td class="wide">${esc(s.overlap)} / ${esc(s.catch_up)}</td>
      <td class="actions"><button type="button" data-act="${s.paused ? 'resume' : 'pause'}" data-id="${esc(s.id)}">${s.paused ? 'Resume' : 'Pause'}</button>
        <button type="button" data-act="trigger" data-id="${esc(s.id)}">Run now</button>
        <button type="button" class="danger" data-act="delete" data-id="${esc(s.id)}">Delete</button></td></tr>`).join('');
    document.getElementById('schedules').replaceChildren(h(list.schedules.length
      ? `<table class="workflows"><thead><tr><th>Id</th><th>When</th><th>State</th><th class="wide">Next</th><th>Fired</th><th>Last workflow</th><th>Entry</th><th class="wide">Overlap / catch-up</th><th></th></tr></thead><tbody>${rows}</tbody></table>`
      : '<p class="muted">No schedules yet. Create one below, or with <code>wfhost schedule create</code>.</p>'));
  };
  await refresh();
}

// ---------------------------------------------------------------------------------------------
// Routing and the refresh loop

async function route() {
  const view = ++ui.view;
  ui.poll = null;
  const hash = location.hash || '#/';
  // Another page starts at its top: the last page's scroll would leave its controls under the
  // sticky header, or out of sight.
  const page = hash.split('?')[0];
  if (page !== ui.page) window.scrollTo(0, 0);
  ui.page = page;
  try {
    if (hash.startsWith('#/w/')) {
      let id;
      try { id = decodeURIComponent(hash.slice(4).split('?')[0]); } catch (_) {
        show(h('<h1>Not a workflow id</h1><p class="error">The address names no workflow: ' + esc(hash) + '</p><p><a href="#/">All workflows</a></p>'));
        return;
      }
      await workflowPage(view, id);
    }
    else if (hash.startsWith('#/hosts')) await hostsPage(view);
    else if (hash.startsWith('#/workers')) await workersPage(view);
    else if (hash.startsWith('#/modules')) await modulesPage(view);
    else if (hash.startsWith('#/schedules')) await schedulesPage(view);
    else await workflowsPage(view);
  } catch (error) {
    if (view === ui.view) document.getElementById('main').append(h(errorBox(error)));
  }
}

// Runs the current page's refresh, one at a time: a look still under way when the next is due
// (a slow store, a long history) is not doubled.
async function refresh() {
  const view = ui.view;
  if (!ui.poll || ui.busy === view) return;
  ui.busy = view;
  try { await ui.poll(); } finally { if (ui.busy === view) ui.busy = null; }
}

function tick() {
  if (!ui.poll || document.visibilityState !== 'visible' || ui.waitingForToken) return;
  const view = ui.view;
  refresh().catch((error) => { if (view === ui.view) console.warn('refresh:', error.message); });
}

document.addEventListener('DOMContentLoaded', () => {
  document.getElementById('find').addEventListener('submit', (e) => {
    e.preventDefault();
    const id = document.getElementById('find-id').value.trim();
    if (id) location.hash = '#/w/' + encodeURIComponent(id);
  });
  window.addEventListener('hashchange', route);
  document.addEventListener('visibilitychange', tick);
  ui.timer = setInterval(tick, POLL_MS);
  route();
});
