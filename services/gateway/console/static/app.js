// Atoll console: one ES module, no build step, no dependencies.
//
// It talks to the Compute API under /v1 of the same origin with the user's
// bearer token (kept in sessionStorage, so it dies with the tab). Lists and
// details are polled every two seconds; a workload's events are listed, then
// watched as Server-Sent Events read with fetch (EventSource cannot send an
// Authorization header) and resumed with Last-Event-ID; logs are NDJSON
// streamed with fetch and a ReadableStream.
//
// Routes live in the fragment: #/ (projects), #/p/<project> (workloads),
// #/p/<project>/<kind>/<name> (one workload).
//
// Hooks the browser test relies on (keep them stable): #token, #signin,
// #signin-error, #whoami, #signout, #project, #project-open, #error,
// #workloads tbody tr[data-workload="<kind>/<name>"] (kind in lower case)
// with td[data-phase] and td[data-ready][data-desired], #detail-phase[data-phase],
// #zones tr[data-zone] td[data-field], #clusters tr[data-cluster],
// #conditions tr[data-condition], #reasons tr, #kube-events tr,
// #events li[data-event][data-id], #events-error, #logs .log-line,
// #logs-status, #logs-error.

const API = '/v1';
const TOKEN_KEY = 'atoll.console.token';
const POLL_MS = 2000;
const MAX_LOG_LINES = 2000;
const MAX_EVENTS = 1000;
const PROJECT_RE = /^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$/;

const $ = (sel, root = document) => root.querySelector(sel);
const enc = encodeURIComponent;

// APIError is a non-2xx answer of the API, carrying its Error document.
class APIError extends Error {
  constructor(status, body, fallback) {
    super(body?.message || fallback);
    this.name = 'APIError';
    this.status = status;
    this.code = body?.code || `HTTP ${status}`;
    this.fields = Array.isArray(body?.fields) ? body.fields : [];
    this.quota = body?.quota || null;
    this.requestId = body?.requestId || '';
  }
}

// describe turns an error into the text shown to the user.
function describe(err) {
  if (err instanceof APIError) {
    let s = `${err.code}: ${err.message}`;
    for (const f of err.fields) s += `\n  ${f.field}: ${f.reason}`;
    if (err.quota) {
      const q = err.quota;
      s += `\n  ${q.tier} ${q.resource}: limit ${q.limit}, used ${q.used}, requested ${q.requested}`;
    }
    if (err.requestId) s += `\n  (request ${err.requestId})`;
    return s;
  }
  if (err instanceof TypeError) return `The gateway cannot be reached (${err.message}).`;
  return String(err?.message || err);
}

// session is the signed-in caller.
const session = {
  token: sessionStorage.getItem(TOKEN_KEY) || '',
  identity: null,
};

// request calls the API and throws an APIError for any non-2xx answer.
async function request(path, { method = 'GET', headers = {}, body, signal, token = session.token } = {}) {
  const res = await fetch(API + path, {
    method,
    body,
    signal,
    cache: 'no-store',
    headers: { Accept: 'application/json', Authorization: `Bearer ${token}`, ...headers },
  });
  if (!res.ok) throw await errorOf(res);
  return res;
}

async function errorOf(res) {
  const text = await res.text().catch(() => '');
  let body = null;
  try {
    body = JSON.parse(text);
  } catch {
    body = null;
  }
  if (!body || typeof body !== 'object') body = text.trim() ? { message: text.trim() } : null;
  return new APIError(res.status, body, `${res.status} ${res.statusText || 'error'}`);
}

async function getJSON(path, opts) {
  const res = await request(path, opts);
  return res.json();
}

// sleep waits ms, or less when signal aborts.
function sleep(ms, signal) {
  return new Promise((resolve) => {
    if (signal?.aborted) return resolve();
    const t = setTimeout(done, ms);
    function done() {
      clearTimeout(t);
      signal?.removeEventListener('abort', done);
      resolve();
    }
    signal?.addEventListener('abort', done, { once: true });
  });
}

// poll runs fn every POLL_MS until signal aborts. onError decides whether
// an error ends the polling; a 401 always does, and signs out.
async function poll(signal, fn, onError) {
  while (!signal.aborted) {
    try {
      await fn();
    } catch (err) {
      if (signal.aborted) return;
      if (err.status === 401) return expired(err);
      if (onError(err)) return;
    }
    await sleep(POLL_MS, signal);
  }
}

// readLines yields the lines of a streamed body as they arrive.
async function* readLines(body) {
  const reader = body.pipeThrough(new TextDecoderStream()).getReader();
  let buf = '';
  let done = false;
  try {
    while (!done) {
      const r = await reader.read();
      done = r.done;
      if (r.value) buf += r.value;
      const lines = buf.split(/\r\n|\r|\n/);
      buf = done ? '' : lines.pop();
      yield* lines;
    }
  } finally {
    if (!done) reader.cancel().catch(() => {});
  }
}

// readSSE yields the messages of a text/event-stream body: {id, event, data}.
async function* readSSE(body) {
  let data = [];
  let id = '';
  let event = '';
  for await (const line of readLines(body)) {
    if (line === '') {
      if (data.length) yield { id, event: event || 'message', data: data.join('\n') };
      data = [];
      event = '';
      continue;
    }
    if (line.startsWith(':')) continue;
    const i = line.indexOf(':');
    const field = i < 0 ? line : line.slice(0, i);
    let value = i < 0 ? '' : line.slice(i + 1);
    if (value.startsWith(' ')) value = value.slice(1);
    if (field === 'data') data.push(value);
    else if (field === 'id') id = value;
    else if (field === 'event') event = value;
  }
}

// --- small DOM helpers -----------------------------------------------------

function el(tag, attrs = {}, ...children) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) {
    if (v === undefined || v === null || v === false) continue;
    if (k === 'class') e.className = v;
    else if (k === 'text') e.textContent = v;
    else if (k.startsWith('data-')) e.setAttribute(k, String(v));
    else e.setAttribute(k, v === true ? '' : String(v));
  }
  for (const c of children) if (c !== null && c !== undefined) e.append(c);
  return e;
}

function showIn(sel, errOrText) {
  const e = $(sel);
  e.textContent = typeof errOrText === 'string' ? errOrText : describe(errOrText);
  e.hidden = false;
}

function hide(sel) {
  const e = $(sel);
  e.hidden = true;
  e.textContent = '';
}

// when parses an API time; the zero time of Go (year 1) counts as none.
function when(value) {
  if (!value) return null;
  const d = value instanceof Date ? value : new Date(value);
  return d.getFullYear() > 1970 ? d : null;
}

function clock(value) {
  const d = when(value);
  return d ? d.toLocaleTimeString([], { hour12: false }) : '';
}

function stamp(value) {
  const d = when(value);
  return d ? d.toLocaleString([], { hour12: false }) : '';
}

function ago(value) {
  const d = when(value);
  if (!d) return '';
  const s = Math.round((Date.now() - d.getTime()) / 1000);
  if (s < 5) return 'just now';
  if (s < 90) return `${s}s ago`;
  if (s < 5400) return `${Math.round(s / 60)}m ago`;
  if (s < 129600) return `${Math.round(s / 3600)}h ago`;
  return `${Math.round(s / 86400)}d ago`;
}

const num = (v) => (typeof v === 'number' ? v : 0);

// --- views ----------------------------------------------------------------

const VIEWS = ['signin-view', 'projects-view', 'list-view', 'detail-view'];

function show(id) {
  for (const v of VIEWS) $(`#${v}`).hidden = v !== id;
}

// current aborts the active view's polls and streams when the view changes.
let current = null;

function startView() {
  current?.abort();
  current = new AbortController();
  return current.signal;
}

function stopView() {
  current?.abort();
  current = null;
}

function parseRoute() {
  let parts;
  try {
    parts = location.hash.replace(/^#\/?/, '').split('/').filter(Boolean).map(decodeURIComponent);
  } catch {
    parts = [];
  }
  if (parts[0] === 'p' && parts.length === 2) return { view: 'list', project: parts[1] };
  if (parts[0] === 'p' && parts.length === 4) return { view: 'detail', project: parts[1], kind: parts[2], name: parts[3] };
  return { view: 'projects' };
}

function route() {
  hide('#error');
  if (!session.identity) {
    stopView();
    show('signin-view');
    return;
  }
  const r = parseRoute();
  const signal = startView();
  setProject(r.project);
  if (r.project && !PROJECT_RE.test(r.project)) {
    showIn('#error', `"${r.project}" is not a project name.`);
    renderProjects();
    return;
  }
  if (r.view === 'list') listView(r.project, signal);
  else if (r.view === 'detail') detailView(r.project, r.kind, r.name, signal);
  else renderProjects();
}

// --- sign in and out ---------------------------------------------------------

async function signIn(token) {
  const identity = await getJSON('/whoami', { token });
  session.token = token;
  session.identity = identity;
  sessionStorage.setItem(TOKEN_KEY, token);
  renderIdentity();
  route();
}

function signOut(message, keepRoute = false) {
  stopView();
  session.token = '';
  session.identity = null;
  sessionStorage.removeItem(TOKEN_KEY);
  $('#identity').hidden = true;
  $('#project-form').hidden = true;
  $('#project-list').replaceChildren();
  $('#workloads tbody').replaceChildren();
  $('#events').replaceChildren();
  $('#logs').replaceChildren();
  $('#projects').replaceChildren();
  hide('#error');
  $('#token').value = '';
  if (message) showIn('#signin-error', message);
  else hide('#signin-error');
  if (!keepRoute && location.hash) history.replaceState(null, '', location.pathname + location.search);
  document.title = 'Atoll console';
  show('signin-view');
  $('#token').focus();
}

// expired signs out after a 401, keeping the route to come back to.
function expired(err) {
  signOut(`Signed out: ${describe(err)}`, true);
}

function renderIdentity() {
  const id = session.identity;
  $('#whoami').textContent = id.subject;
  $('#admin-badge').hidden = !id.platformAdmin;
  $('#identity').hidden = false;
  $('#project-form').hidden = false;
  const opts = Object.entries(id.roles || {})
    .sort(([a], [b]) => a.localeCompare(b))
    .map(([p, role]) => el('option', { value: p, label: `${p} (${role})` }));
  $('#project-list').replaceChildren(...opts);
  hide('#signin-error');
}

function setProject(project) {
  const id = session.identity;
  $('#project').value = project || '';
  const role = project ? id.roles?.[project] || (id.platformAdmin ? '' : 'no role') : '';
  $('#role').textContent = role;
  $('#role').hidden = !role;
}

function renderProjects() {
  show('projects-view');
  document.title = 'Atoll console';
  const id = session.identity;
  const roles = Object.entries(id.roles || {}).sort(([a], [b]) => a.localeCompare(b));
  $('#projects').replaceChildren(
    ...roles.map(([p, role]) =>
      el('li', {}, el('a', { href: `#/p/${enc(p)}`, 'data-project': p }, p, el('span', { class: 'badge', text: role }))),
    ),
  );
  let hint;
  if (id.platformAdmin) hint = 'As a platform admin you may open any project: type its name above.';
  else if (roles.length) hint = 'Pick a project.';
  else hint = 'You hold no role in any project yet: ask a project admin for one.';
  $('#projects-hint').textContent = hint;
  if (!id.platformAdmin && roles.length === 1 && parseRoute().view === 'projects') {
    location.replace(`#/p/${enc(roles[0][0])}`);
  }
}

// --- the workload list ---------------------------------------------------

const workloadKey = (w) => `${String(w.kind).toLowerCase()}/${w.metadata?.name}`;
const detailHref = (project, w) => `#/p/${enc(project)}/${enc(w.kind)}/${enc(w.metadata?.name)}`;

async function listAll(project, signal) {
  const items = [];
  let cont = '';
  for (let page = 0; page < 20; page++) {
    const q = new URLSearchParams({ limit: '1000' });
    if (cont) q.set('continue', cont);
    const list = await getJSON(`/projects/${enc(project)}/workloads?${q}`, { signal });
    items.push(...(list.items || []));
    cont = list.continue;
    if (!cont) break;
  }
  return items;
}

function listView(project, signal) {
  show('list-view');
  document.title = `${project} · Atoll console`;
  $('#list-project').textContent = project;
  $('#workloads tbody').replaceChildren();
  $('#workloads-empty').hidden = true;
  hide('#list-error');
  $('#list-status').textContent = 'loading…';
  poll(
    signal,
    async () => {
      const items = await listAll(project, signal);
      if (signal.aborted) return;
      renderList(project, items);
      hide('#list-error');
      $('#list-status').textContent = `live · updated ${clock(new Date())}`;
    },
    (err) => {
      showIn('#list-error', err);
      // Without a role here, or with a name the API refuses, polling cannot help.
      const final = err.status === 403 || err.status === 404 || err.status === 400;
      if (final) {
        $('#workloads tbody').replaceChildren();
        $('#list-status').textContent = '';
      } else {
        $('#list-status').textContent = 'retrying…';
      }
      return final;
    },
  );
}

function zoneSummary(st) {
  return Object.keys(st?.zones || {})
    .sort()
    .map((z) => `${z} ${num(st.zones[z].ready)}/${num(st.zones[z].desired)}`)
    .join(' · ');
}

function renderList(project, items) {
  const tbody = $('#workloads tbody');
  const old = new Map([...tbody.rows].map((r) => [r.dataset.workload, r]));
  const rows = items.map((w) => {
    const key = workloadKey(w);
    let tr = old.get(key);
    old.delete(key);
    if (!tr) {
      tr = el(
        'tr',
        { 'data-workload': key },
        el('td', { class: 'kind', text: w.kind }),
        el('td', { class: 'name' }, el('a', { href: detailHref(project, w), text: w.metadata?.name })),
        el('td', { class: 'phase-cell', 'data-phase': '' }),
        el('td', { class: 'num ready', 'data-ready': 0, 'data-desired': 0 }),
        el('td', { class: 'zones-cell' }),
        el('td', { class: 'updated muted' }),
      );
      tr.addEventListener('click', (e) => {
        if (!e.target.closest('a')) location.hash = tr.querySelector('a').getAttribute('href');
      });
    }
    const st = w.status || {};
    const phase = st.phase || 'Pending';
    const cells = tr.cells;
    if (cells[2].dataset.phase !== phase) cells[2].dataset.phase = phase;
    const ctl = w.control?.stopped ? ' (stopped)' : w.control?.paused ? ' (paused)' : '';
    cells[2].textContent = phase + ctl;
    cells[3].dataset.ready = num(st.ready);
    cells[3].dataset.desired = num(st.desired);
    cells[3].textContent = `${num(st.ready)} / ${num(st.desired)}`;
    cells[4].textContent = zoneSummary(st);
    const updated = st.updated || w.metadata?.updated || w.metadata?.created;
    cells[5].textContent = ago(updated);
    cells[5].title = stamp(updated);
    return tr;
  });
  for (const tr of old.values()) tr.remove();
  rows.forEach((tr, i) => {
    if (tbody.rows[i] !== tr) tbody.insertBefore(tr, tbody.rows[i] || null);
  });
  $('#workloads-empty').hidden = items.length > 0;
}

// --- one workload ------------------------------------------------------------

function detailView(project, kind, name, signal) {
  show('detail-view');
  document.title = `${name} · ${project} · Atoll console`;
  $('#back').href = `#/p/${enc(project)}`;
  $('#detail-title').textContent = `${kind} ${name}`;
  $('#detail-phase').dataset.phase = '';
  $('#detail-phase').textContent = '';
  $('#detail-ready').textContent = '';
  $('#detail-status').textContent = 'loading…';
  for (const sel of ['#meta', '#zones tbody', '#clusters tbody', '#reasons tbody', '#conditions tbody', '#kube-events tbody', '#events', '#logs']) {
    $(sel).replaceChildren();
  }
  for (const sel of ['#detail-error', '#events-error', '#logs-error']) hide(sel);
  for (const sel of ['#zones-empty', '#conditions-empty', '#kube-events-empty', '#events-empty', '#reasons-card']) $(sel).hidden = true;

  const base = `/projects/${enc(project)}/workloads/${enc(kind)}/${enc(name)}`;
  let last = '';
  poll(
    signal,
    async () => {
      const w = await getJSON(base, { signal });
      if (signal.aborted) return;
      hide('#detail-error');
      $('#detail-status').textContent = `live · updated ${clock(new Date())}`;
      const snapshot = JSON.stringify(w);
      if (snapshot !== last) {
        last = snapshot;
        renderDetail(w);
      }
    },
    (err) => {
      showIn('#detail-error', err);
      // A 404 may be a workload created a moment ago (reads lag writes a
      // little) or one deleted: keep looking either way.
      const final = err.status === 403 || err.status === 400;
      $('#detail-status').textContent = final ? '' : 'retrying…';
      return final;
    },
  );
  watchEvents(base, signal);
  tailLogs(base, signal);
}

function countsRows(tbody, map, attr) {
  const keys = Object.keys(map || {}).sort();
  tbody.replaceChildren(
    ...keys.map((k) => {
      const c = map[k] || {};
      return el(
        'tr',
        { [attr]: k },
        el('td', { text: k }),
        ...['desired', 'ready', 'running', 'succeeded', 'failed'].map((f) =>
          el('td', { class: 'num', 'data-field': f, text: String(num(c[f])) }),
        ),
      );
    }),
  );
  return keys.length;
}

function renderDetail(w) {
  const st = w.status || {};
  const md = w.metadata || {};
  const phase = st.phase || 'Pending';
  $('#detail-title').textContent = `${w.kind} ${md.name}`;
  $('#detail-phase').dataset.phase = phase;
  $('#detail-phase').textContent = phase;
  $('#detail-ready').textContent = `${num(st.ready)} of ${num(st.desired)} ready`;

  const rows = [
    ['Project', md.project],
    ['Kind', w.kind],
    ['Name', md.name],
    ['UID', md.uid && el('code', { text: md.uid })],
    ['Generation', `${md.generation ?? ''}${st.observedGeneration !== undefined ? ` (observed ${st.observedGeneration})` : ''}`],
    ['Created', stamp(md.created)],
    ['Updated', stamp(md.updated)],
    ['Status updated', stamp(st.updated)],
    [
      'Labels',
      Object.keys(md.labels || {}).length
        ? el('span', { class: 'labels' }, ...Object.entries(md.labels).sort().flatMap(([k, v]) => [el('code', { text: `${k}=${v}` }), ' ']))
        : '',
    ],
    ['Images', (st.images || []).join(', ')],
    ['Paused', w.control?.paused ? 'yes' : ''],
    ['Stopped', w.control?.stopped ? 'yes' : ''],
    ['Restarted', stamp(w.control?.restartedAt)],
    ['Running', st.running !== undefined ? String(st.running) : ''],
    ['Succeeded', st.succeeded ? String(st.succeeded) : ''],
    ['Failed', st.failed ? String(st.failed) : ''],
  ];
  $('#meta').replaceChildren(
    ...rows.filter(([, v]) => v !== undefined && v !== null && v !== '').flatMap(([k, v]) => [el('dt', { text: k }), el('dd', {}, v)]),
  );

  $('#zones-empty').hidden = countsRows($('#zones tbody'), st.zones, 'data-zone') > 0;
  countsRows($('#clusters tbody'), st.clusters, 'data-cluster');

  const reasons = st.reasons || [];
  $('#reasons-card').hidden = reasons.length === 0;
  $('#reasons tbody').replaceChildren(
    ...reasons.map((r) =>
      el('tr', { 'data-cluster': r.cluster, 'data-filter': r.filter }, el('td', { text: r.cluster }), el('td', { text: r.filter }), el('td', { text: r.reason })),
    ),
  );

  const conds = st.conditions || [];
  $('#conditions-empty').hidden = conds.length > 0;
  $('#conditions tbody').replaceChildren(
    ...conds.map((c) =>
      el(
        'tr',
        { 'data-condition': c.type, 'data-status': String(!!c.status) },
        el('td', { text: c.type }),
        el('td', { class: c.status ? '' : 'cond-false', text: c.status ? 'True' : 'False' }),
        el('td', { text: c.reason || '' }),
        el('td', { text: c.message || '' }),
      ),
    ),
  );

  const kev = [...(st.events || [])].sort((a, b) => String(b.time || '').localeCompare(String(a.time || '')));
  $('#kube-events-empty').hidden = kev.length > 0;
  $('#kube-events tbody').replaceChildren(
    ...kev.map((e) =>
      el(
        'tr',
        { 'data-reason': e.reason || '' },
        el('td', { title: stamp(e.time), text: clock(e.time) }),
        el('td', { text: e.cluster || '' }),
        el('td', { text: e.object || '' }),
        el('td', { class: e.type || '', text: e.type || '' }),
        el('td', { text: e.reason || '' }),
        el('td', { text: e.message || '' }),
      ),
    ),
  );
}

// watchEvents lists the workload's events, then follows them live,
// resuming after the last id it holds whenever the stream breaks.
async function watchEvents(base, signal) {
  const list = $('#events');
  const seen = new Set();
  let lastId = 0;
  const status = (t) => ($('#events-status').textContent = t);
  const add = (ev) => {
    const id = Number(ev?.id);
    if (!ev || !Number.isFinite(id) || seen.has(id)) return;
    seen.add(id);
    lastId = Math.max(lastId, id);
    const li = el(
      'li',
      { 'data-event': ev.event, 'data-id': id, 'data-generation': ev.generation },
      el('span', { class: 'time', title: stamp(ev.time), text: clock(ev.time) }),
      el('span', { class: 'name', text: ev.event }),
      el('span', { class: 'message', text: [ev.message, ev.generation ? `generation ${ev.generation}` : ''].filter(Boolean).join(' · ') }),
    );
    // Keep id order even if an event arrives late.
    let before = null;
    for (let n = list.lastElementChild; n && Number(n.dataset.id) > id; n = n.previousElementSibling) before = n;
    list.insertBefore(li, before);
    while (list.children.length > MAX_EVENTS) list.firstElementChild.remove();
    $('#events-empty').hidden = true;
  };

  status('loading…');
  try {
    const page = await getJSON(`${base}/events`, { signal });
    (page.items || []).forEach(add);
    $('#events-empty').hidden = list.children.length > 0;
  } catch (err) {
    if (signal.aborted) return;
    if (err.status === 401) return expired(err);
    showIn('#events-error', err);
  }

  let delay = 1000;
  while (!signal.aborted) {
    try {
      const res = await request(`${base}/events?watch=true`, {
        headers: { Accept: 'text/event-stream', 'Last-Event-ID': String(lastId) },
        signal,
      });
      hide('#events-error');
      status('live');
      delay = 1000;
      for await (const msg of readSSE(res.body)) {
        let ev;
        try {
          ev = JSON.parse(msg.data);
        } catch {
          continue;
        }
        if (ev && typeof ev === 'object') {
          if (ev.id === undefined && msg.id) ev.id = Number(msg.id);
          add(ev);
        }
      }
    } catch (err) {
      if (signal.aborted) return;
      if (err.status === 401) return expired(err);
      if (err instanceof APIError) showIn('#events-error', err);
      if (err.status === 403 || err.status === 400) {
        status('');
        return;
      }
    }
    if (signal.aborted) return;
    status('reconnecting…');
    await sleep(delay, signal);
    delay = Math.min(delay * 2, 15000);
  }
}

// tailLogs streams the workload's logs (the last 100 lines of each
// container, then new ones) and reconnects when the stream ends, asking only
// for lines since the last one it holds.
async function tailLogs(base, signal) {
  const box = $('#logs');
  const status = (t) => ($('#logs-status').textContent = t);
  let lastTime = 0;
  const recent = new Set();
  const recentOrder = [];
  let delay = 2000;

  const append = (rec) => {
    const t = when(rec.time)?.getTime() ?? NaN;
    const key = `${rec.cluster}\u0000${rec.pod}\u0000${rec.container}\u0000${rec.time}\u0000${rec.line}`;
    // After a reconnect, lines of the last second come again: drop those.
    if (Number.isFinite(t) && t <= lastTime && recent.has(key)) return false;
    if (Number.isFinite(t)) {
      lastTime = Math.max(lastTime, t);
      recent.add(key);
      recentOrder.push(key);
      if (recentOrder.length > 500) recent.delete(recentOrder.shift());
    }
    const stick = box.scrollTop + box.clientHeight >= box.scrollHeight - 8;
    const src = [rec.pod, rec.container].filter(Boolean).join('/');
    box.append(
      el(
        'div',
        { class: 'log-line', 'data-cluster': rec.cluster, 'data-pod': rec.pod, 'data-container': rec.container },
        Number.isFinite(t) ? el('span', { class: 'time', title: stamp(rec.time), text: clock(rec.time) }) : null,
        src ? el('span', { class: 'src', title: rec.cluster || '', text: src }) : null,
        el('span', { class: 'text', text: String(rec.line ?? '') }),
      ),
    );
    while (box.childElementCount > MAX_LOG_LINES) box.firstElementChild.remove();
    if (stick) box.scrollTop = box.scrollHeight;
    return true;
  };

  while (!signal.aborted) {
    const q = new URLSearchParams({ follow: 'true' });
    if (lastTime) q.set('sinceSeconds', String(Math.max(1, Math.ceil((Date.now() - lastTime) / 1000) + 1)));
    else q.set('tail', '100');
    status(box.childElementCount ? 'reconnecting…' : 'connecting…');
    let got = 0;
    try {
      const res = await request(`${base}/logs?${q}`, { headers: { Accept: 'application/x-ndjson' }, signal });
      hide('#logs-error');
      status('streaming');
      delay = 2000;
      for await (const line of readLines(res.body)) {
        if (!line.trim()) continue;
        let rec;
        try {
          rec = JSON.parse(line);
        } catch {
          rec = { line };
        }
        if (!rec || typeof rec !== 'object') rec = { line: String(rec) };
        if (rec.line === undefined && (rec.message || rec.error)) {
          showIn('#logs-error', rec.code ? `${rec.code}: ${rec.message || rec.error}` : String(rec.message || rec.error));
          continue;
        }
        if (append(rec)) got++;
      }
      if (signal.aborted) return;
      status(got || box.childElementCount ? 'stream ended · reconnecting…' : 'waiting for log lines…');
    } catch (err) {
      if (signal.aborted) return;
      if (err.status === 401) return expired(err);
      showIn('#logs-error', err);
      status('retrying…');
      if (err.status === 403 || err.status === 400) {
        status('');
        return;
      }
      delay = Math.min(delay * 2, 30000);
    }
    await sleep(delay, signal);
  }
}

// --- wiring ------------------------------------------------------------------

function wire() {
  $('#signin-form').addEventListener('submit', async (e) => {
    e.preventDefault();
    const token = $('#token').value.trim();
    hide('#signin-error');
    if (!token) {
      showIn('#signin-error', 'Enter a token.');
      return;
    }
    const button = $('#signin');
    button.disabled = true;
    try {
      await signIn(token);
      $('#token').value = '';
    } catch (err) {
      session.identity = null;
      showIn('#signin-error', err);
      show('signin-view');
    } finally {
      button.disabled = false;
    }
  });

  $('#signout').addEventListener('click', () => signOut());

  $('#project-form').addEventListener('submit', (e) => {
    e.preventDefault();
    const p = $('#project').value.trim().toLowerCase();
    if (!PROJECT_RE.test(p)) {
      showIn('#error', `"${p}" is not a project name: lower-case letters, digits and dashes.`);
      return;
    }
    const target = `#/p/${enc(p)}`;
    if (location.hash === target) route();
    else location.hash = target;
  });

  window.addEventListener('hashchange', route);
}

async function boot() {
  wire();
  if (!session.token) {
    signOut('', true);
    return;
  }
  try {
    await signIn(session.token);
  } catch (err) {
    signOut(describe(err), true);
  }
}

boot();
