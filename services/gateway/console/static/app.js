// Atoll console: one ES module, no build step; its one dependency, the
// shell's terminal (xterm.js), is loaded from vendor/ when a shell opens.
//
// It talks to the Compute API under /v1 of the same origin with the user's
// bearer token (kept in sessionStorage, so it dies with the tab). Lists and
// details are polled every two seconds; a workload's events are listed, then
// watched as Server-Sent Events read with fetch (EventSource cannot send an
// Authorization header) and resumed with Last-Event-ID; logs are NDJSON
// streamed with fetch and a ReadableStream.
//
// Routes live in the fragment: #/ (projects, and a form to create one),
// #/p/<project> (workloads), #/p/<project>/members (its members, managed
// by its admins), #/p/<project>/tokens (its tokens for machines),
// #/p/<project>/quota (its quota requests, and a form to ask for more),
// #/quota-requests (platform admins: the queue to review),
// #/sidecars (platform admins: the managed sidecars and their rollout),
// #/p/<project>/<kind>/<name> (one workload, the kind in
// any case), #/region (the SLIs, and the member clusters for platform
// admins).
//
// The kinds and what applies to each (pods of their own, operations) come
// from GET /v1/kinds at sign-in: a page shows only the buttons and panels
// that apply (no logs, replicas, Restart or Stop for a Scaler).
//
// Operations (scale, pause/resume, restart, stop/start, delete) ask first in
// a modal <dialog>, then call the API; a refusal shows the API's error
// document under the buttons, and a success renders the workload the API
// answers at once. The SLI charts are inline SVG drawn from GET /v1/slis
// (the gateway's per-minute history of the last hour). Styles are set
// through the CSSOM only: the page's Content-Security-Policy forbids style
// attributes.
//
// Hooks the browser test relies on (keep them stable): #token, #signin,
// #signin-error, #whoami, #signout, #project, #project-open,
// #project-select option[value] (platform admins), #projects a[data-project],
// #nav-region, #error,
// #workloads tbody tr[data-workload="<kind>/<name>"] (kind in lower case)
// with td[data-phase] and td[data-ready][data-desired], #detail-phase[data-phase],
// #detail-ready[data-ready][data-desired], #zones tr[data-zone] td[data-field],
// #clusters tr[data-cluster], #conditions tr[data-condition], #reasons tr,
// #kube-events tr, #events li[data-event][data-id], #events-error,
// #logs-card[data-file], #logs .log-line, #logs-status, #logs-error, #logs-file,
// #logs-file-follow, #logs-file-clear; #replicas-card;
// #shell-card[data-state=idle|connecting|open|ended], #shell-pod, #shell-container,
// #shell-command, #shell-open, #shell-close, #shell-term (xterm.js), #shell-error,
// #shell-end[data-exit-code];
// #scaler-card, #chart-scaler svg circle[data-replicas];
// #op-scale, #op-pause[data-op=pause|resume], #op-restart,
// #op-stop[data-op=stop|start], #op-delete, #op-status, #op-error;
// the dialog #confirm with #confirm-replicas, #confirm-ok, #confirm-cancel;
// #region-zones section[data-zone] .cluster[data-cluster][data-healthy][data-cordoned]
// .pool[data-pool] .bar-row[data-resource][data-used][data-capacity],
// .cluster button.cordon[data-op], .cluster .cluster-error,
// .cluster button.labels-edit, .cluster .labels-form .buffer|.labels-text|.labels-save;
// #new-workload, #op-edit, #editor-view: #editor (CodeMirror; .editorView for tests),
// #editor-example, #editor-load, #editor-review, #editor-apply, #editor-status,
// #editor-error, #editor-fields li[data-line][data-field], #editor-diff span[data-op];
// #quota-form, #quota-tier, #quota-cpu, #quota-memory, #quota-storage, #quota-gpus, #quota-pods,
// #quota-save, #quota-status, #quota-error;
// #chart-launch svg circle.pt, #chart-errors svg circle.pt, #slis-error,
// #region-error;
// #nav-remediation, #remediation-reason, #remediation-pause-region,
// #remediation-resume-region, #remediation-op-error, #remediation-error,
// #remediation-clusters .remediation[data-cluster][data-paused]
// button[data-op=pause|resume], tr[data-domain][data-open],
// tr[data-node][data-phase] td.why;
// #nav-upgrades, #upgrades-reason, #upgrades-op-error, #upgrades-error,
// #upgrades-plans .upgrade[data-plan][data-phase] .paused-reason,
// button[data-op=pause|resume|abort], .upgrade-cluster[data-cluster][data-state]
// tr.upgrade-pool[data-pool][data-state][data-wave], tr.upgrade-node[data-node][data-state];
// #kind-cards .card[data-card=cronjob|daemon|training|pod] dd[data-field], tr[data-run][data-outcome],
// tr[data-cluster][data-behind] td[data-field], tr[data-rank], tr[data-container][data-type]; #rollout-card[data-rollout-phase], #rollout-phase,
// #rollout-reason[data-paused], #rollout-meta dd[data-field], #rollout-zones tr[data-zone][data-state],
// #rollout-actions, #rollout-pause, #rollout-resume, #rollout-undo, #rollout-status,
// #rollout-error, #rollout-op-error;
// #endpoints-card[data-ready][data-total], #endpoints-meta dd[data-field],
// #endpoints-zones tr[data-zone][data-cluster] td[data-field=ready|notready],
// #endpoints tr[data-pod][data-zone][data-cluster][data-ready] td[data-field=address|port],
// #endpoints-status, #endpoints-error, #endpoints-empty;
// #projects li[data-project-item] a.members-link, #project-create-form, #project-create-name,
// #project-create-display, #project-create-description, #project-create-owner (platform admins),
// #project-create, #project-create-status, #project-create-error; #members-link;
// #members-view: #members-project, #members-role, #members-meta dd[data-field],
// #members tr[data-member="<kind>/<name>"][data-role] select.member-role, button.member-remove,
// #member-add-form, #member-name, #member-group, #member-role, #member-add,
// #members-status, #members-error; #members-tokens-link, #members-quota-link,
// #projects li[data-project-item] a.tokens-link, a.quota-link;
// #tokens-view: #tokens tr[data-token][data-role] td[data-field=expires] button.token-revoke,
// #tokens-empty, #token-create-form, #token-name, #token-role, #token-ttl, #token-create,
// #token-secret-card, #token-secret, #token-secret-copy, #token-secret-done,
// #tokens-status, #tokens-error (the list), #tokens-op-error (a create or revoke);
// #quota-requests-view: #qr-form, #qr-tier, #qr-cpu, #qr-memory, #qr-storage, #qr-gpus,
// #qr-pods, #qr-reason, #qr-submit, #qr-status, #qr-error,
// #quota-requests tr[data-request][data-state], #quota-requests-error;
// #nav-quota-requests, #queue-view: #queue-state,
// #queue tr[data-request][data-project][data-state] input.queue-reason,
// button.queue-approve, button.queue-reject, #queue-status, #queue-error, #queue-op-error;
// #nav-sidecars, #sidecars-view: #sidecars-reason, #sidecars-pause, #sidecars-resume,
// #sidecars-abort, #sidecars-status, #sidecars-error, #sidecars-op-error,
// #sidecars-current[data-version] dd[data-field], #sidecars-list tr[data-sidecar],
// #sidecars-rollout[data-phase][data-version] dd[data-field], #sidecars-paused[data-paused],
// #sidecars-zones tr[data-zone][data-phase] td[data-field], #sidecars-zones-none,
// #sidecars-moving tr[data-workload][data-ready], #sidecars-moving-none,
// #sidecars-versions tr[data-version] td[data-field=workloads],
// #sidecars-behind tr[data-workload][data-version], #sidecars-behind-none,
// #sidecars-history tr[data-version], #sidecars-empty.

const API = '/v1';
const TOKEN_KEY = 'atoll.console.token';
const POLL_MS = 2000;
const SLI_POLL_MS = 10000;
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
  projects: [], // the last GET /v1/projects: [{name, role}]
  kinds: [], // GET /v1/kinds at sign-in: [{name, path, placed, adminOnly, everyCluster, pods, ops}]
};

// kindInfo is the kind named in any case (a route's #/p/demo/scaler/web
// names the Scaler), as GET /v1/kinds describes it, or null.
function kindInfo(name) {
  const lower = String(name ?? '').toLowerCase();
  return session.kinds.find((k) => k.path === lower || String(k.name).toLowerCase() === lower) || null;
}

// KIND_VIEWS is what the workload page draws for each kind beyond what
// GET /v1/kinds says (pods of its own, operations): its own cards (the
// ids of kindCard, 'scaler' for #scaler-card, 'rollout' for
// #rollout-card, 'endpoints' for #endpoints-card) and what its pause
// does. Every registered kind has an entry: a Go test
// (console/kinds_test.go) holds the keys to api.KindNames().
const KIND_VIEWS = {
  App: { cards: ['rollout', 'endpoints'], pause: 'Its Deployments are held at zero replicas until it is resumed. Its quota stays reserved.' },
  Config: { cards: ['config'] },
  CronJob: { cards: ['cronjob'], pause: 'It is suspended: no new run starts until it is resumed. Its quota stays reserved.' },
  Daemon: { cards: ['daemon'] },
  JobSet: { cards: [], pause: 'Its Jobs are suspended until it is resumed. Its quota stays reserved.' },
  Pod: { cards: ['pod'] },
  Scaler: { cards: ['scaler'], pause: 'The autoscaler leaves its App alone until it is resumed: scale the App by hand meanwhile.' },
  Secret: { cards: ['secret'] },
  TrainingJob: { cards: ['training'], pause: "Its gang's Job is suspended until it is resumed. Its quota stays reserved." },
};

// hasCard says whether kind's page draws the card id.
const hasCard = (kind, id) => !!KIND_VIEWS[kind]?.cards.includes(id);

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

// poll runs fn every ms (POLL_MS) until signal aborts. onError decides
// whether an error ends the polling; a 401 always does, and signs out.
async function poll(signal, fn, onError, ms = POLL_MS) {
  while (!signal.aborted) {
    try {
      await fn();
    } catch (err) {
      if (signal.aborted) return;
      if (err.status === 401) return expired(err);
      if (onError(err)) return;
    }
    await sleep(ms, signal);
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

const VIEWS = ['signin-view', 'projects-view', 'members-view', 'tokens-view', 'quota-requests-view', 'queue-view', 'list-view', 'detail-view', 'editor-view', 'region-view', 'remediation-view', 'upgrades-view', 'sidecars-view'];

function show(id) {
  for (const v of VIEWS) $(`#${v}`).hidden = v !== id;
}

// current aborts the active view's polls and streams when the view changes.
let current = null;

function startView() {
  current?.abort();
  closeDialog();
  current = new AbortController();
  return current.signal;
}

function stopView() {
  current?.abort();
  closeDialog();
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
  if (parts[0] === 'p' && parts.length === 3 && parts[2] === 'new') return { view: 'editor', project: parts[1] };
  if (parts[0] === 'p' && parts.length === 3 && parts[2] === 'members') return { view: 'members', project: parts[1] };
  if (parts[0] === 'p' && parts.length === 3 && parts[2] === 'tokens') return { view: 'tokens', project: parts[1] };
  if (parts[0] === 'p' && parts.length === 3 && parts[2] === 'quota') return { view: 'quota-requests', project: parts[1] };
  if (parts[0] === 'p' && parts.length === 5 && parts[4] === 'edit') return { view: 'editor', project: parts[1], kind: parts[2], name: parts[3] };
  if (parts[0] === 'region' && parts.length === 1) return { view: 'region' };
  if (parts[0] === 'remediation' && parts.length === 1) return { view: 'remediation' };
  if (parts[0] === 'upgrades' && parts.length === 1) return { view: 'upgrades' };
  if (parts[0] === 'quota-requests' && parts.length === 1) return { view: 'queue' };
  if (parts[0] === 'sidecars' && parts.length === 1) return { view: 'sidecars' };
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
  // A new token's secret is shown once: leaving its page forgets it.
  forgetSecret();
  const tops = { region: '#/region', remediation: '#/remediation', upgrades: '#/upgrades', queue: '#/quota-requests', sidecars: '#/sidecars' };
  const here = tops[r.view] || '#/';
  for (const a of document.querySelectorAll('#nav a')) a.classList.toggle('current', a.getAttribute('href') === here);
  if (r.project && !PROJECT_RE.test(r.project)) {
    showIn('#error', `"${r.project}" is not a project name.`);
    renderProjects(signal);
    return;
  }
  if (r.view === 'list') listView(r.project, signal);
  else if (r.view === 'detail') detailView(r.project, r.kind, r.name, signal);
  else if (r.view === 'editor') editorView(r.project, r.kind, r.name, signal);
  else if (r.view === 'members') membersView(r.project, signal);
  else if (r.view === 'tokens') tokensView(r.project, signal);
  else if (r.view === 'quota-requests') quotaRequestsView(r.project, signal);
  else if (r.view === 'queue') queueView(signal);
  else if (r.view === 'region') regionView(signal);
  else if (r.view === 'remediation') remediationView(signal);
  else if (r.view === 'upgrades') upgradesView(signal);
  else if (r.view === 'sidecars') sidecarsView(signal);
  else renderProjects(signal);
}

// --- sign in and out ---------------------------------------------------------

async function signIn(token) {
  const [identity, kinds] = await Promise.all([getJSON('/whoami', { token }), getJSON('/kinds', { token })]);
  session.token = token;
  session.identity = identity;
  session.kinds = Array.isArray(kinds?.items) ? kinds.items : [];
  sessionStorage.setItem(TOKEN_KEY, token);
  renderIdentity();
  route();
}

function signOut(message, keepRoute = false) {
  stopView();
  session.token = '';
  session.identity = null;
  session.projects = [];
  session.kinds = [];
  sessionStorage.removeItem(TOKEN_KEY);
  $('#identity').hidden = true;
  $('#project-form').hidden = true;
  $('#nav').hidden = true;
  $('#project-list').replaceChildren();
  $('#project-select').replaceChildren();
  $('#region-zones').replaceChildren();
  for (const c of ['#chart-launch', '#chart-errors', '#launch-summary', '#errors-summary']) $(c).replaceChildren();
  $('#workloads tbody').replaceChildren();
  $('#events').replaceChildren();
  $('#logs').replaceChildren();
  $('#projects').replaceChildren();
  forgetSecret();
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

// renderIdentity shows who is signed in. A platform admin picks a project
// from the list of every project (a select filled from GET /v1/projects);
// anyone else types one, helped by the projects they hold a role in.
function renderIdentity() {
  const id = session.identity;
  $('#whoami').textContent = id.subject;
  $('#admin-badge').hidden = !id.platformAdmin;
  $('#identity').hidden = false;
  $('#project-form').hidden = false;
  $('#nav').hidden = false;
  $('#nav-remediation').hidden = !id.platformAdmin;
  $('#nav-upgrades').hidden = !id.platformAdmin;
  $('#nav-quota-requests').hidden = !id.platformAdmin;
  $('#nav-sidecars').hidden = !id.platformAdmin;
  $('#project').hidden = !!id.platformAdmin;
  $('#project').required = !id.platformAdmin;
  $('#project-open').hidden = !!id.platformAdmin;
  $('#project-select').hidden = !id.platformAdmin;
  const opts = Object.entries(id.roles || {})
    .sort(([a], [b]) => a.localeCompare(b))
    .map(([p, role]) => el('option', { value: p, label: `${p} (${role})` }));
  $('#project-list').replaceChildren(...opts);
  renderProjectPicker();
  // The projects page loads the list itself.
  if (id.platformAdmin && parseRoute().view !== 'projects') {
    loadProjects().catch((err) => (err.status === 401 ? expired(err) : showIn('#error', err)));
  }
  hide('#signin-error');
}

// loadProjects fetches the projects the caller may open: for a platform
// admin every project with workloads or quota.
async function loadProjects(signal) {
  const list = await getJSON('/projects', { signal });
  if (!session.identity || signal?.aborted) return session.projects;
  session.projects = (list.items || []).filter((p) => p && typeof p.name === 'string');
  renderProjectPicker();
  return session.projects;
}

// renderProjectPicker fills a platform admin's project select, keeping the
// open project in it even when the list does not hold it (yet).
function renderProjectPicker() {
  if (!session.identity?.platformAdmin) return;
  const sel = $('#project-select');
  const open = parseRoute().project || '';
  const names = session.projects.map((p) => p.name);
  if (open && PROJECT_RE.test(open) && !names.includes(open)) names.push(open);
  names.sort((a, b) => a.localeCompare(b));
  const have = [...sel.options].map((o) => o.value).join('\n');
  if (have !== ['', ...names].join('\n')) {
    sel.replaceChildren(el('option', { value: '', text: 'Choose a project…' }), ...names.map((n) => el('option', { value: n, text: n })));
  }
  sel.value = open;
}

function setProject(project) {
  const id = session.identity;
  $('#project').value = project || '';
  renderProjectPicker();
  // A membership's role is in the projects list, not in the token's roles.
  const listed = session.projects.find((p) => p.name === project)?.role;
  const role = project ? id.roles?.[project] || (listed !== 'platform-admin' && listed) || (id.platformAdmin ? '' : 'no role') : '';
  $('#role').textContent = role;
  $('#role').hidden = !role;
}

// renderProjectLinks lists projects: each opens its workloads, and a
// registered one (created as a resource) also its members.
function renderProjectLinks(items) {
  $('#projects').replaceChildren(
    ...items.map(({ name, role, displayName, owner, registered }) =>
      el(
        'li',
        { 'data-project-item': name },
        el('a', { href: `#/p/${enc(name)}`, 'data-project': name, title: displayName || name }, name, el('span', { class: 'badge', text: role })),
        registered ? el('span', { class: 'muted small', text: ` ${displayName ? `${displayName} · ` : ''}owner ${owner || '-'} · ` }) : null,
        registered ? el('a', { href: `#/p/${enc(name)}/members`, class: 'members-link small', text: 'members' }) : null,
        registered ? ' · ' : null,
        registered ? el('a', { href: `#/p/${enc(name)}/tokens`, class: 'tokens-link small', text: 'tokens' }) : null,
        registered ? ' · ' : null,
        registered ? el('a', { href: `#/p/${enc(name)}/quota`, class: 'quota-link small', text: 'quota requests' }) : null,
      ),
    ),
  );
}

// renderProjects lists the caller's projects: at once those of its roles,
// then what GET /v1/projects answers (for a platform admin, every project).
function renderProjects(signal) {
  show('projects-view');
  document.title = 'Atoll console';
  const id = session.identity;
  const roles = Object.entries(id.roles || {})
    .sort(([a], [b]) => a.localeCompare(b))
    .map(([name, role]) => ({ name, role }));
  renderProjectLinks(id.platformAdmin && session.projects.length ? session.projects : roles);
  let hint;
  if (id.platformAdmin) hint = 'Every project with workloads or quota. As a platform admin you may open any of them.';
  else if (roles.length) hint = 'Pick a project.';
  else hint = 'You hold no role in any project yet: ask a project admin for one, or create one below.';
  $('#projects-hint').textContent = hint;
  $('#project-create-owner-label').hidden = !id.platformAdmin;
  // Straight to the one project at sign-in; the Projects link still shows this page.
  if (!id.platformAdmin && roles.length === 1 && parseRoute().view === 'projects' && location.hash === '') {
    location.replace(`#/p/${enc(roles[0].name)}`);
    return;
  }
  if (!signal) return;
  loadProjects(signal)
    .then((items) => {
      if (!signal.aborted) renderProjectLinks(items);
    })
    .catch((err) => {
      if (signal.aborted) return;
      if (err.status === 401) return expired(err);
      showIn('#error', err);
    });
}

// createProject submits the new-project form: POST /v1/projects, then
// the new project's members page.
async function createProject() {
  hide('#project-create-error');
  const name = $('#project-create-name').value.trim().toLowerCase();
  if (!PROJECT_RE.test(name)) {
    showIn('#project-create-error', `"${name}" is not a project name: lower-case letters, digits and dashes.`);
    return;
  }
  const doc = { name };
  const display = $('#project-create-display').value.trim();
  const description = $('#project-create-description').value.trim();
  const owner = session.identity?.platformAdmin ? $('#project-create-owner').value.trim() : '';
  if (display) doc.displayName = display;
  if (description) doc.description = description;
  if (owner) doc.owner = owner;
  const button = $('#project-create');
  button.disabled = true;
  $('#project-create-status').textContent = `creating ${name}…`;
  try {
    const res = await request('/projects', { method: 'POST', body: JSON.stringify(doc), headers: { 'Content-Type': 'application/json' } });
    const p = await res.json();
    $('#project-create-status').textContent = `Project ${p.name} created, owned by ${p.owner}.`;
    for (const f of ['#project-create-name', '#project-create-display', '#project-create-description', '#project-create-owner']) $(f).value = '';
    location.hash = `#/p/${enc(p.name)}/members`;
  } catch (err) {
    $('#project-create-status').textContent = '';
    if (err.status === 401) return expired(err);
    showIn('#project-create-error', err);
  } finally {
    button.disabled = false;
  }
}

// members is the open members page: its project, and whether the caller
// may manage it (an admin of the project, or a platform admin).
const members = { project: '', manage: false, signal: null };

// membersView shows a project's owner and members, polled; its admins
// add members, change roles and remove members through
// /v1/projects/{project}/members.
function membersView(project, signal) {
  show('members-view');
  document.title = `Members of ${project} · Atoll console`;
  Object.assign(members, { project, manage: false, signal });
  $('#members-project').textContent = project;
  $('#members-back').href = `#/p/${enc(project)}`;
  $('#members-tokens-link').href = `#/p/${enc(project)}/tokens`;
  $('#members-quota-link').href = `#/p/${enc(project)}/quota`;
  $('#members-role').textContent = '';
  $('#members-meta').replaceChildren();
  $('#members tbody').replaceChildren();
  $('#member-add-form').hidden = true;
  $('#members-status').textContent = 'loading…';
  hide('#members-error');
  poll(
    signal,
    async () => {
      const p = await getJSON(`/projects/${enc(project)}`, { signal });
      if (signal.aborted) return;
      renderMembers(p);
      hide('#members-error');
      $('#members-status').textContent = `live · updated ${clock(new Date())}`;
    },
    (err) => {
      showIn('#members-error', err);
      const final = err.status === 403 || err.status === 404 || err.status === 400;
      $('#members-status').textContent = final ? '' : 'retrying…';
      return final;
    },
  );
}

const ROLES = ['viewer', 'developer', 'admin'];

const memberKey = (m) => `${m.kind || 'user'}/${m.name}`;

function renderMembers(p) {
  const manage = p.role === 'admin' || !!session.identity?.platformAdmin;
  members.manage = manage;
  $('#members-role').textContent = p.role || '';
  $('#member-add-form').hidden = !manage;
  const meta = metaList([
    ['owner', 'Owner', p.owner || '-'],
    ['displayName', 'Display name', p.displayName || '-'],
    ['description', 'Description', p.description || '-'],
    ['labels', 'Labels', Object.entries(p.labels || {}).map(([k, v]) => `${k}=${v}`).join(', ') || '-'],
    ['created', 'Created', p.created ? `${stamp(p.created)} by ${p.createdBy || '-'}` : '-'],
  ]);
  $('#members-meta').replaceChildren(...meta.children);
  const tbody = $('#members tbody');
  const rows = new Map([...tbody.children].map((tr) => [tr.dataset.member, tr]));
  const items = [...(p.members || [])].sort((a, b) => memberKey(a).localeCompare(memberKey(b)));
  const keep = items.map((m) => {
    const key = memberKey(m);
    let tr = rows.get(key);
    // A row being changed keeps its control until the change answers.
    if (tr && (tr.dataset.busy === 'true' || (tr.dataset.role === m.role && tr.dataset.manage === String(manage)))) return tr;
    tr = memberRow(m, manage);
    return tr;
  });
  tbody.replaceChildren(...keep);
}

function memberRow(m, manage) {
  const key = memberKey(m);
  const kind = m.kind || 'user';
  let role = m.role;
  let remove = null;
  if (manage) {
    role = el('select', { class: 'member-role', 'aria-label': `Role of ${kind} ${m.name}` }, ...ROLES.map((r) => el('option', { value: r, text: r })));
    role.value = m.role;
    role.addEventListener('change', (e) => setMemberRole(m, e.currentTarget.value, e.currentTarget.closest('tr')));
    remove = el('button', { type: 'button', class: 'secondary danger member-remove', text: 'Remove' });
    remove.addEventListener('click', (e) => removeMember(m, e.currentTarget.closest('tr')));
  }
  return el(
    'tr',
    { 'data-member': key, 'data-role': m.role, 'data-manage': String(manage) },
    el('td', { text: kind }),
    el('td', { text: m.name }),
    el('td', {}, role),
    el('td', { text: m.addedBy || '-' }),
    el('td', {}, remove),
  );
}

// memberCall runs one change of the members page, marking tr busy, and
// shows the API's answer.
async function memberCall(tr, what, call) {
  hide('#members-error');
  if (tr) tr.dataset.busy = 'true';
  $('#members-status').textContent = `${what}…`;
  try {
    await call();
    $('#members-status').textContent = `${what}: done.`;
    const p = await getJSON(`/projects/${enc(members.project)}`, { signal: members.signal });
    if (tr) delete tr.dataset.busy;
    if (tr) tr.dataset.role = '';
    renderMembers(p);
  } catch (err) {
    if (tr) delete tr.dataset.busy;
    if (err.status === 401) return expired(err);
    if (members.signal?.aborted) return;
    $('#members-status').textContent = '';
    showIn('#members-error', err);
    // Put the row back as the API has it.
    if (tr) tr.dataset.role = '';
    getJSON(`/projects/${enc(members.project)}`, { signal: members.signal }).then(renderMembers, () => {});
  }
}

function setMemberRole(m, role, tr) {
  const kind = m.kind || 'user';
  return memberCall(tr, `${kind} ${m.name} to ${role}`, () =>
    request(`/projects/${enc(members.project)}/members/${enc(m.name)}`, {
      method: 'PUT',
      body: JSON.stringify({ kind, role }),
      headers: { 'Content-Type': 'application/json' },
      signal: members.signal,
    }),
  );
}

async function removeMember(m, tr) {
  const kind = m.kind || 'user';
  const answer = await confirmDialog({
    title: `Remove ${kind} ${m.name} from ${members.project}?`,
    text: `${m.name} loses the ${m.role} role the membership gives (a role its own token names stays). It holds at every gateway within a second.`,
    ok: 'Remove',
    danger: true,
  });
  if (!answer) return;
  return memberCall(tr, `removing ${kind} ${m.name}`, () =>
    request(`/projects/${enc(members.project)}/members/${enc(m.name)}?kind=${enc(kind)}`, { method: 'DELETE', signal: members.signal }),
  );
}

function addMember() {
  const name = $('#member-name').value.trim();
  if (!name) {
    showIn('#members-error', 'Enter a user or group name.');
    return;
  }
  const kind = $('#member-group').checked ? 'group' : 'user';
  const role = $('#member-role').value;
  return memberCall(null, `adding ${kind} ${name} as ${role}`, async () => {
    await request(`/projects/${enc(members.project)}/members/${enc(name)}`, {
      method: 'PUT',
      body: JSON.stringify({ kind, role }),
      headers: { 'Content-Type': 'application/json' },
      signal: members.signal,
    });
    $('#member-name').value = '';
    $('#member-group').checked = false;
  });
}

// --- tokens ------------------------------------------------------------------

// tokens is the open tokens page: its project, and the view's signal.
const tokens = { project: '', signal: null };

// tokensView lists a project's tokens for machines, polled; its admins
// create them and revoke them through /v1/projects/{project}/tokens. A
// new token's secret is in the create's answer only: the page shows it
// once, in #token-secret-card, until dismissed or the route changes.
function tokensView(project, signal) {
  show('tokens-view');
  document.title = `Tokens of ${project} · Atoll console`;
  Object.assign(tokens, { project, signal });
  $('#tokens-project').textContent = project;
  $('#tokens-back').href = `#/p/${enc(project)}/members`;
  $('#tokens tbody').replaceChildren();
  $('#tokens-empty').hidden = true;
  $('#tokens-status').textContent = 'loading…';
  hide('#tokens-error');
  hide('#tokens-op-error');
  poll(
    signal,
    async () => {
      const list = await getJSON(`/projects/${enc(project)}/tokens`, { signal });
      if (signal.aborted) return;
      renderTokens(list.items || []);
      hide('#tokens-error');
      $('#tokens-status').textContent = `live · updated ${clock(new Date())}`;
    },
    (err) => {
      showIn('#tokens-error', err);
      const final = err.status === 403 || err.status === 404 || err.status === 400;
      $('#tokens-status').textContent = final ? '' : 'retrying…';
      return final;
    },
  );
}

// forgetSecret drops a new token's secret from the page.
function forgetSecret() {
  $('#token-secret-card').hidden = true;
  $('#token-secret').textContent = '';
  $('#token-secret-name').textContent = '';
  $('#token-secret-copied').textContent = '';
}

function renderTokens(items) {
  const tbody = $('#tokens tbody');
  const rows = new Map([...tbody.children].map((tr) => [tr.dataset.token, tr]));
  const sorted = [...items].filter((t) => t && typeof t.name === 'string').sort((a, b) => a.name.localeCompare(b.name));
  tbody.replaceChildren(
    ...sorted.map((t) => {
      const sig = `${t.role}|${t.expires}|${t.lastUsed || ''}`;
      const tr = rows.get(t.name);
      if (tr && tr.dataset.sig === sig) return tr;
      return tokenRow(t, sig);
    }),
  );
  $('#tokens-empty').hidden = sorted.length > 0;
}

function tokenRow(t, sig) {
  const revoke = el('button', { type: 'button', class: 'secondary danger token-revoke', text: 'Revoke' });
  revoke.addEventListener('click', () => revokeToken(t));
  return el(
    'tr',
    { 'data-token': t.name, 'data-role': t.role, 'data-sig': sig },
    el('td', { text: t.name }),
    el('td', { text: t.role }),
    el('td', { 'data-field': 'expires', 'data-expires': t.expires || '', title: t.expires || '', text: stamp(t.expires) || '-' }),
    el('td', { text: `${ago(t.created)} by ${t.createdBy || '-'}` }),
    el('td', { text: when(t.lastUsed) ? ago(t.lastUsed) : 'never' }),
    el('td', {}, revoke),
  );
}

// tokenCall runs one change of the tokens page, shows the API's answer
// (a refusal in #tokens-op-error), and lists the tokens again.
async function tokenCall(what, call) {
  hide('#tokens-op-error');
  $('#tokens-status').textContent = `${what}…`;
  try {
    const out = await call();
    if (tokens.signal?.aborted) return out;
    const list = await getJSON(`/projects/${enc(tokens.project)}/tokens`, { signal: tokens.signal });
    renderTokens(list.items || []);
    return out;
  } catch (err) {
    if (err.status === 401) return expired(err);
    if (tokens.signal?.aborted) return undefined;
    $('#tokens-status').textContent = '';
    showIn('#tokens-op-error', err);
    return undefined;
  }
}

async function createToken() {
  const name = $('#token-name').value.trim();
  const doc = { name, role: $('#token-role').value, ttl: $('#token-ttl').value.trim() };
  const button = $('#token-create');
  button.disabled = true;
  forgetSecret();
  try {
    await tokenCall(`creating token ${name}`, async () => {
      const t = await getJSON(`/projects/${enc(tokens.project)}/tokens`, {
        method: 'POST',
        body: JSON.stringify(doc),
        headers: { 'Content-Type': 'application/json' },
        signal: tokens.signal,
      });
      $('#token-name').value = '';
      $('#token-secret-name').textContent = t.name;
      $('#token-secret').textContent = t.secret || '';
      $('#token-secret-card').hidden = false;
      $('#tokens-status').textContent = `Token ${t.name} created; it expires ${stamp(t.expires)}.`;
      return t;
    });
  } finally {
    button.disabled = false;
  }
}

async function copySecret() {
  const secret = $('#token-secret');
  try {
    await navigator.clipboard.writeText(secret.textContent);
    $('#token-secret-copied').textContent = 'Copied.';
  } catch {
    // No clipboard (an insecure origin, or refused): select it instead.
    const range = document.createRange();
    range.selectNodeContents(secret);
    getSelection().removeAllRanges();
    getSelection().addRange(range);
    $('#token-secret-copied').textContent = 'Selected: copy it with Ctrl+C (⌘C).';
  }
}

async function revokeToken(t) {
  const answer = await confirmDialog({
    title: `Revoke token ${t.name} of ${tokens.project}?`,
    text: `Whatever uses it loses its ${t.role} role: every gateway refuses it within a second. This cannot be undone.`,
    ok: 'Revoke',
    danger: true,
  });
  if (!answer) return;
  await tokenCall(`revoking token ${t.name}`, async () => {
    await request(`/projects/${enc(tokens.project)}/tokens/${enc(t.name)}`, { method: 'DELETE', signal: tokens.signal });
    $('#tokens-status').textContent = `Token ${t.name} revoked.`;
  });
}

function wireTokens() {
  $('#token-create-form').addEventListener('submit', (e) => {
    e.preventDefault();
    createToken();
  });
  $('#token-secret-copy').addEventListener('click', copySecret);
  $('#token-secret-done').addEventListener('click', forgetSecret);
}

// --- quota requests ------------------------------------------------------------

// quotaReqs is the open quota requests page of a project; queue the
// platform admins' queue.
const quotaReqs = { project: '', signal: null };
const queue = { signal: null };

// asked describes the caps a request asks for.
function asked(limit) {
  const l = limit || {};
  const parts = [];
  if (l.milliCPU != null) parts.push(`CPU ${cores(l.milliCPU)}`);
  if (l.memoryBytes != null) parts.push(`memory ${bytes(l.memoryBytes)}`);
  if (l.storageBytes != null) parts.push(`storage ${bytes(l.storageBytes)}`);
  if (l.gpus != null) parts.push(`GPUs ${l.gpus}`);
  if (l.pods != null) parts.push(`pods ${l.pods}`);
  return parts.join(', ') || '-';
}

const decisionOf = (r) => (r.reviewer ? `${r.reviewer}${r.decision ? `: ${r.decision}` : ''}` : '-');

// quotaRequestsView lists a project's quota requests, polled, with a form
// its admins ask for more with (POST /v1/projects/{project}/quota/requests).
function quotaRequestsView(project, signal) {
  show('quota-requests-view');
  document.title = `Quota requests of ${project} · Atoll console`;
  Object.assign(quotaReqs, { project, signal });
  $('#quota-requests-project').textContent = project;
  $('#quota-requests-back').href = `#/p/${enc(project)}`;
  $('#quota-requests tbody').replaceChildren();
  $('#quota-requests-empty').hidden = true;
  $('#quota-requests-status').textContent = 'loading…';
  hide('#quota-requests-error');
  hide('#qr-error');
  $('#qr-status').textContent = '';
  poll(
    signal,
    async () => {
      await loadQuotaRequests();
      hide('#quota-requests-error');
      $('#quota-requests-status').textContent = `live · updated ${clock(new Date())}`;
    },
    (err) => {
      showIn('#quota-requests-error', err);
      const final = err.status === 403 || err.status === 404 || err.status === 400;
      $('#quota-requests-status').textContent = final ? '' : 'retrying…';
      return final;
    },
  );
}

async function loadQuotaRequests() {
  const { project, signal } = quotaReqs;
  const list = await getJSON(`/projects/${enc(project)}/quota/requests`, { signal });
  if (signal?.aborted) return;
  const items = (list.items || []).filter((r) => r && typeof r.id === 'string');
  $('#quota-requests tbody').replaceChildren(
    ...items.map((r) =>
      el(
        'tr',
        { 'data-request': r.id, 'data-state': r.state },
        el('td', { text: r.id }),
        el('td', { text: r.tier }),
        el('td', { text: asked(r.limit) }),
        el('td', { text: r.reason }),
        el('td', { text: `${r.requester} · ${ago(r.created)}` }),
        el('td', {}, el('span', { class: 'badge', text: r.state })),
        el('td', { text: decisionOf(r) }),
      ),
    ),
  );
  $('#quota-requests-empty').hidden = items.length > 0;
}

// submitQuotaRequest sends the form as it is: the API refuses what is
// wrong (a missing reason, an amount it cannot parse) and says why.
async function submitQuotaRequest() {
  hide('#qr-error');
  const doc = { tier: $('#qr-tier').value, reason: $('#qr-reason').value.trim() };
  for (const [f, sel] of [['cpu', '#qr-cpu'], ['memory', '#qr-memory'], ['storage', '#qr-storage']]) {
    const v = $(sel).value.trim();
    if (v) doc[f] = v;
  }
  for (const [f, sel] of [['gpus', '#qr-gpus'], ['pods', '#qr-pods']]) {
    const v = $(sel).value.trim();
    if (v !== '') doc[f] = Number(v);
  }
  const button = $('#qr-submit');
  button.disabled = true;
  $('#qr-status').textContent = 'requesting…';
  try {
    const r = await getJSON(`/projects/${enc(quotaReqs.project)}/quota/requests`, {
      method: 'POST',
      body: JSON.stringify(doc),
      headers: { 'Content-Type': 'application/json' },
      signal: quotaReqs.signal,
    });
    $('#qr-status').textContent = `Request ${r.id} is ${r.state}: a platform admin reviews it.`;
    for (const f of ['#qr-cpu', '#qr-memory', '#qr-storage', '#qr-gpus', '#qr-pods', '#qr-reason']) $(f).value = '';
    await loadQuotaRequests();
  } catch (err) {
    if (err.status === 401) return expired(err);
    if (quotaReqs.signal?.aborted) return;
    $('#qr-status').textContent = '';
    showIn('#qr-error', err);
  } finally {
    button.disabled = false;
  }
}

// queueView is the platform admins' queue: every project's quota
// requests in a state (pending by default), polled, each pending one
// approved or rejected with a reason (required to reject).
function queueView(signal) {
  show('queue-view');
  document.title = 'Quota requests · Atoll console';
  queue.signal = signal;
  $('#queue tbody').replaceChildren();
  $('#queue-empty').hidden = true;
  $('#queue-status').textContent = 'loading…';
  hide('#queue-error');
  hide('#queue-op-error');
  poll(
    signal,
    async () => {
      await loadQueue();
      hide('#queue-error');
      $('#queue-status').textContent = `live · updated ${clock(new Date())}`;
    },
    (err) => {
      showIn('#queue-error', err);
      const final = err.status === 403 || err.status === 400;
      $('#queue-status').textContent = final ? '' : 'retrying…';
      return final;
    },
  );
}

async function loadQueue() {
  const signal = queue.signal;
  const state = $('#queue-state').value;
  const list = await getJSON(`/quota/requests${state ? `?state=${enc(state)}` : ''}`, { signal });
  if (signal?.aborted || $('#queue-state').value !== state) return;
  const tbody = $('#queue tbody');
  const rows = new Map([...tbody.children].map((tr) => [tr.dataset.request, tr]));
  const items = (list.items || []).filter((r) => r && typeof r.id === 'string');
  tbody.replaceChildren(
    ...items.map((r) => {
      const tr = rows.get(r.id);
      // A row keeps the reason being typed while its state holds.
      if (tr && tr.dataset.state === r.state) return tr;
      return queueRow(r);
    }),
  );
  $('#queue-empty').hidden = items.length > 0;
}

function queueRow(r) {
  let cell;
  if (r.state === 'pending' || r.state === 'approving') {
    const reason = el('input', { class: 'queue-reason', autocomplete: 'off', placeholder: 'reason (needed to reject)', 'aria-label': `Reason for ${r.id}` });
    const approve = el('button', { type: 'button', class: 'queue-approve', text: 'Approve' });
    const reject = el('button', { type: 'button', class: 'secondary danger queue-reject', text: 'Reject' });
    approve.addEventListener('click', (e) => decide(r, 'approve', e.currentTarget.closest('tr')));
    reject.addEventListener('click', (e) => decide(r, 'reject', e.currentTarget.closest('tr')));
    cell = el('span', { class: 'decide' }, reason, ' ', approve, ' ', reject);
  } else {
    cell = decisionOf(r);
  }
  return el(
    'tr',
    { 'data-request': r.id, 'data-project': r.project, 'data-state': r.state },
    el('td', {}, el('a', { href: `#/p/${enc(r.project)}/quota`, text: r.project })),
    el('td', { text: r.id }),
    el('td', { text: r.tier }),
    el('td', { text: asked(r.limit) }),
    el('td', { text: r.reason }),
    el('td', { text: `${r.requester} · ${ago(r.created)}` }),
    el('td', {}, el('span', { class: 'badge', text: r.state })),
    el('td', {}, cell),
  );
}

// decide approves or rejects one request, as the reason typed in its row
// says; a refusal (no reason to reject, decided already) shows the API's
// error in #queue-op-error.
async function decide(r, decision, tr) {
  hide('#queue-op-error');
  const reason = tr?.querySelector('.queue-reason')?.value.trim() || '';
  for (const b of tr?.querySelectorAll('button') || []) b.disabled = true;
  $('#queue-status').textContent = `${decision === 'approve' ? 'approving' : 'rejecting'} ${r.id}…`;
  try {
    const got = await getJSON(`/projects/${enc(r.project)}/quota/requests/${enc(r.id)}/${decision}`, {
      method: 'POST',
      body: JSON.stringify(reason ? { reason } : {}),
      headers: { 'Content-Type': 'application/json' },
      signal: queue.signal,
    });
    $('#queue-status').textContent = `${got.id} is ${got.state}.`;
  } catch (err) {
    if (err.status === 401) return expired(err);
    if (queue.signal?.aborted) return;
    $('#queue-status').textContent = '';
    showIn('#queue-op-error', err);
  } finally {
    for (const b of tr?.querySelectorAll('button') || []) b.disabled = false;
  }
  await loadQueue().catch(() => {});
}

function wireQuotaRequests() {
  $('#qr-form').addEventListener('submit', (e) => {
    e.preventDefault();
    submitQuotaRequest();
  });
  $('#queue-state').addEventListener('change', () => {
    $('#queue tbody').replaceChildren();
    if (!queue.signal || queue.signal.aborted) return;
    loadQueue().catch((err) => (err.status === 401 ? expired(err) : showIn('#queue-error', err)));
  });
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
  $('#new-workload').href = `#/p/${enc(project)}/new`;
  $('#members-link').href = `#/p/${enc(project)}/members`;
  $('#workloads tbody').replaceChildren();
  $('#workloads-empty').hidden = true;
  hide('#list-error');
  $('#list-status').textContent = 'loading…';
  quotaView(project, signal);
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

// quotaView polls the project's quota: usage per tier and what
// Preemptible borrows of the capacity the other tiers leave idle.
function quotaView(project, signal) {
  $('#quota-card').hidden = true;
  quotaEditor.reset();
  poll(
    signal,
    async () => {
      const q = await getJSON(`/projects/${enc(project)}/quota`, { signal });
      if (!signal.aborted) {
        renderQuota(q);
        quotaEditor.show(project, q, signal);
      }
    },
    // The workloads' panel reports errors; without the quota, hide it.
    () => {
      $('#quota-card').hidden = true;
      return false;
    },
  );
}

// usedOf is "used / limit" of one resource of a tier. Every limit is a
// cap; 0 forbids the resource ("none").
function usedOf(t, key, fmt) {
  const lim = num(t.limit?.[key]) ? fmt(t.limit[key]) : 'none';
  return `${fmt(t.used?.[key])} / ${lim}`;
}

// borrowedText sums up what a tier borrows ('' for nothing).
function borrowedText(b) {
  if (!b || !(num(b.milliCPU) || num(b.memoryBytes) || num(b.gpus) || num(b.pods))) return '';
  const parts = [`${cores(b.milliCPU)} CPU`, bytes(b.memoryBytes)];
  if (num(b.gpus)) parts.push(`${num(b.gpus)} GPU`);
  parts.push(`${num(b.pods)} pods`);
  return parts.join(' · ') + (b.reclaimable ? ' (reclaimable)' : '');
}

function renderQuota(q) {
  const tiers = q?.tiers || [];
  $('#quota tbody').replaceChildren(
    ...tiers.map((t) =>
      el(
        'tr',
        { 'data-tier': t.tier },
        el('td', { text: t.default ? `${t.tier} (default)` : t.tier }),
        el('td', { class: 'num', text: usedOf(t, 'milliCPU', cores) }),
        el('td', { class: 'num', text: usedOf(t, 'memoryBytes', bytes) }),
        el('td', { class: 'num', text: usedOf(t, 'storageBytes', bytes) }),
        el('td', { class: 'num', text: usedOf(t, 'gpus', (v) => String(num(v))) }),
        el('td', { class: 'num', text: usedOf(t, 'pods', (v) => String(num(v))) }),
        el('td', { class: 'borrowed', text: borrowedText({ ...t.borrowed, reclaimable: t.reclaimable }) || '–' }),
      ),
    ),
  );
  $('#quota-workloads').textContent = num(q?.maxWorkloads)
    ? `Workloads: ${num(q.workloads)} of at most ${num(q.maxWorkloads)}.`
    : '';
  const lender = tiers.find((t) => borrowedText(t.borrowed));
  $('#quota-note').hidden = !lender;
  $('#quota-note').textContent = lender
    ? `${lender.tier} work runs on capacity the Reserved and OnDemand tiers leave idle; it is preempted when they need the room and runs again when capacity returns.`
    : '';
  $('#quota-card').hidden = tiers.length === 0;
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
  // The route may name the kind in any case; the page uses its name.
  const info = kindInfo(kind);
  if (info) kind = info.name;
  // A kind with no pods of its own (a Scaler) has no logs and no replicas.
  const pods = !info || info.pods;
  show('detail-view');
  document.title = `${name} · ${project} · Atoll console`;
  $('#back').href = `#/p/${enc(project)}`;
  $('#op-edit').href = `#/p/${enc(project)}/${enc(kind)}/${enc(name)}/edit`;
  $('#detail-title').textContent = `${kind} ${name}`;
  $('#detail-phase').dataset.phase = '';
  $('#detail-phase').textContent = '';
  $('#detail-ready').textContent = '';
  $('#detail-status').textContent = 'loading…';
  for (const sel of ['#meta', '#zones tbody', '#clusters tbody', '#reasons tbody', '#conditions tbody', '#kube-events tbody', '#events', '#logs']) {
    $(sel).replaceChildren();
  }
  for (const sel of ['#detail-error', '#events-error', '#logs-error', '#op-error']) hide(sel);
  for (const sel of ['#zones-empty', '#conditions-empty', '#kube-events-empty', '#events-empty', '#reasons-card']) $(sel).hidden = true;
  $('#op-status').textContent = '';

  const base = `/projects/${enc(project)}/workloads/${enc(kind)}/${enc(name)}`;
  let last = '';
  const render = (w) => {
    const snapshot = JSON.stringify(w);
    if (snapshot !== last) {
      last = snapshot;
      renderDetail(w);
    }
  };
  shown = { project, base, info, workload: null, render, signal, busy: false };
  $('#replicas-card').hidden = !pods;
  $('#logs-card').hidden = !pods;
  $('#detail-ready').hidden = !pods;
  renderActions();
  poll(
    signal,
    async () => {
      const w = await getJSON(base, { signal });
      if (signal.aborted) return;
      hide('#detail-error');
      $('#detail-status').textContent = `live · updated ${clock(new Date())}`;
      render(w);
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
  if (pods) logsPanel(base, signal);
  $('#shell-card').hidden = !pods;
  if (pods) shellPanel(base, signal);
  $('#scaler-card').hidden = !hasCard(kind, 'scaler');
  if (hasCard(kind, 'scaler')) watchScaler(project, name, signal);
  $('#kind-cards').replaceChildren();
  $('#rollout-card').hidden = !hasCard(kind, 'rollout');
  if (hasCard(kind, 'rollout')) watchRollout(project, name, signal);
  $('#endpoints-card').hidden = !hasCard(kind, 'endpoints');
  if (hasCard(kind, 'endpoints')) watchEndpoints(base, signal);
}

// watchScaler polls a Scaler's recorded decisions and draws the replicas
// it chose and its metrics' values over time, with the latest decisions
// and their reasons below.
function watchScaler(project, name, signal) {
  $('#decisions tbody').replaceChildren();
  $('#chart-scaler').replaceChildren();
  hide('#scaler-error');
  poll(
    signal,
    async () => {
      const h = await getJSON(`/projects/${enc(project)}/scalers/${enc(name)}/history`, { signal });
      if (signal.aborted) return;
      hide('#scaler-error');
      $('#scaler-status').textContent = `live · updated ${clock(new Date())}`;
      renderScaler(Array.isArray(h?.decisions) ? h.decisions : []);
    },
    (err) => {
      showIn('#scaler-error', err);
      return err.status === 403 || err.status === 400;
    },
  );
}

function renderScaler(ds) {
  const box = $('#chart-scaler');
  const W = 600;
  const H = 160;
  const L = 40;
  const R = 40;
  const T = 10;
  const B = 20;
  const root = svg('svg', { viewBox: `0 0 ${W} ${H}`, class: 'chart-svg', 'data-points': ds.length });
  if (!ds.length) {
    root.append(svg('text', { class: 'empty', x: W / 2, y: H / 2, 'text-anchor': 'middle' }, 'No decisions yet'));
    box.replaceChildren(root);
    $('#decisions tbody').replaceChildren();
    return;
  }
  const t0 = Date.parse(ds[0].time);
  const t1 = Math.max(t0 + 1000, Date.parse(ds[ds.length - 1].time));
  const x = (t) => L + ((Date.parse(t) - t0) / (t1 - t0)) * (W - L - R);
  const rmax = niceCeil(Math.max(1, ...ds.map((d) => d.desired || 0)));
  const yr = (v) => T + (H - T - B) * (1 - v / rmax);
  const metric = ds.flatMap((d) => d.proposals || []).find((p) => p.state === 'ok' || p.state === 'within-tolerance')?.metric;
  const valueOf = (d) => (d.proposals || []).find((p) => p.metric === metric && (p.state === 'ok' || p.state === 'within-tolerance'));
  const mvals = ds.map((d) => valueOf(d)?.value).filter((v) => Number.isFinite(v));
  const mmax = niceCeil(Math.max(1, ...mvals));
  const ym = (v) => T + (H - T - B) * (1 - v / mmax);
  for (const f of [0, 0.5, 1]) {
    root.append(svg('line', { class: 'grid', x1: L, x2: W - R, y1: yr(rmax * f), y2: yr(rmax * f) }));
    root.append(svg('text', { class: 'axis', x: L - 6, y: yr(rmax * f) + 4, 'text-anchor': 'end' }, String(Math.round(rmax * f))));
    if (metric) root.append(svg('text', { class: 'axis', x: W - R + 6, y: ym(mmax * f) + 4 }, String(Math.round(mmax * f))));
  }
  root.append(svg('text', { class: 'axis', x: L, y: H - 4 }, clock(ds[0].time)));
  root.append(svg('text', { class: 'axis', x: W - R, y: H - 4, 'text-anchor': 'end' }, `${clock(ds[ds.length - 1].time)}${metric ? ` · right: ${metric}` : ''}`));
  // Replicas as a step line, the metric as points joined.
  let d = '';
  ds.forEach((dec, i) => {
    const px = x(dec.time);
    const py = yr(dec.desired);
    d += i ? `H${px.toFixed(1)}V${py.toFixed(1)}` : `M${px.toFixed(1)},${py.toFixed(1)}`;
  });
  root.append(svg('path', { class: 'line p50', d }));
  let m = '';
  ds.forEach((dec) => {
    const p = valueOf(dec);
    if (!p) return;
    m += `${m ? 'L' : 'M'}${x(dec.time).toFixed(1)},${ym(p.value).toFixed(1)}`;
  });
  if (m) root.append(svg('path', { class: 'line p95', d: m }));
  ds.forEach((dec) => {
    root.append(svg('circle', { class: 'pt p50', cx: x(dec.time).toFixed(1), cy: yr(dec.desired).toFixed(1), r: 2.5, 'data-replicas': dec.desired },
      svg('title', {}, `${clock(dec.time)} · ${dec.current} → ${dec.desired} · ${dec.outcome} · ${dec.reason}`)));
  });
  box.replaceChildren(root);
  const rows = ds.slice(-12).reverse().map((dec) => el('tr', { 'data-outcome': dec.outcome },
    el('td', {}, clock(dec.time)),
    el('td', { class: 'num' }, `${dec.current} → ${dec.desired}`),
    el('td', {}, (dec.proposals || []).map((p) => (p.state.startsWith('failed') ? `${p.metric} ${p.state} → ${p.replicas}` : `${p.metric} ${+p.value.toFixed(1)}/${p.target} → ${p.replicas}`)).join(', ') || '–'),
    el('td', {}, dec.floor ? `${dec.floor} (${dec.floorSchedule})` : '–'),
    el('td', {}, dec.outcome === 'refused' ? `refused: ${dec.detail}` : dec.outcome),
    el('td', {}, dec.reason),
  ));
  $('#decisions tbody').replaceChildren(...rows);
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
  if (shown) shown.workload = w;
  shown?.onWorkload?.(w);
  renderActions();
  $('#detail-title').textContent = `${w.kind} ${md.name}`;
  $('#detail-phase').dataset.phase = phase;
  $('#detail-phase').textContent = phase;
  $('#detail-ready').dataset.ready = num(st.ready);
  $('#detail-ready').dataset.desired = num(st.desired);
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
    ['Spec', specSummary(w)],
    ['Paused', w.control?.paused ? 'yes' : ''],
    ['Stopped', w.control?.stopped ? 'yes' : ''],
    ['Restarted', stamp(w.control?.restartedAt)],
    ['Queue', st.queue ? `${st.queue} position ${num(st.position)}${when(st.queuedAt) ? ` (as of ${stamp(st.queuedAt)})` : ''}` : ''],
    ['Preempted by', st.preemptedBy || ''],
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

  renderKindCards(w);
  if (hasCard(w.kind, 'rollout')) drawRollout();

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

// specSummary says how many pods a workload asks for.
function specSummary(w) {
  const spec = w.spec || {};
  if (w.kind === 'App') return `${spec.replicas ?? 1} replicas`;
  if (w.kind === 'JobSet') return `parallelism ${num(spec.parallelism)} of ${num(spec.completions)} completions`;
  return '';
}

// --- operations --------------------------------------------------------------

// shown is the workload the detail view shows, for its operation buttons:
// {project, base (its API path), workload (the last one rendered), render,
// signal (the view's), busy (an operation in flight)}.
let shown = null;

const OP_BUTTONS = ['#op-scale', '#op-pause', '#op-restart', '#op-stop', '#op-delete'];

// renderActions fits the buttons to the workload: Pause or Resume, Stop or
// Start, and only the operations its kind supports (GET /v1/kinds: no
// Scale or Pause for a Pod, no Restart or Stop for a Scaler).
function renderActions() {
  const w = shown?.workload;
  const c = w?.control || {};
  const ops = shown?.info?.ops || [];
  $('#op-scale').hidden = !ops.includes('scale');
  $('#op-pause').hidden = !ops.includes(c.paused ? 'resume' : 'pause');
  $('#op-restart').hidden = !ops.includes('restart');
  $('#op-stop').hidden = !ops.includes(c.stopped ? 'start' : 'stop');
  setOp($('#op-pause'), c.paused ? 'resume' : 'pause', c.paused ? 'Resume' : 'Pause');
  setOp($('#op-stop'), c.stopped ? 'start' : 'stop', c.stopped ? 'Start' : 'Stop');
  for (const sel of OP_BUTTONS) $(sel).disabled = !w || !!shown?.busy;
}

function setOp(button, op, label) {
  if (button.dataset.op !== op) button.dataset.op = op;
  if (button.textContent !== label) button.textContent = label;
}

// opText is what the dialog asks before each operation, and what the page
// says once it is done.
function opText(op, w) {
  const what = `${w.kind} ${w.metadata?.name}`;
  const spec = w.spec || {};
  switch (op) {
    case 'scale':
      if (w.kind === 'JobSet') {
        return {
          title: `Scale ${what}`,
          text: `How many of its ${num(spec.completions)} indexes run at once (1 to ${num(spec.completions)}); pause it to run none.`,
          ok: 'Scale',
          input: { label: 'Parallelism', value: num(spec.parallelism), min: 1, max: num(spec.completions) || undefined },
          done: (v) => `parallelism set to ${v.spec?.parallelism}`,
        };
      }
      return {
        title: `Scale ${what}`,
        text: 'The replicas the App runs, spread over the zones by the scheduler.',
        ok: 'Scale',
        input: { label: 'Replicas', value: spec.replicas ?? 1, min: 0 },
        done: (v) => `scaled to ${v.spec?.replicas ?? 1} replicas`,
      };
    case 'pause':
      return {
        title: `Pause ${what}?`,
        text: KIND_VIEWS[w.kind]?.pause || 'It is paused until it is resumed.',
        ok: 'Pause',
        done: () => 'paused',
      };
    case 'resume':
      return { title: `Resume ${what}?`, text: 'Its pods run again.', ok: 'Resume', done: () => 'resumed' };
    case 'restart':
      return { title: `Restart ${what}?`, text: 'Every pod is replaced, a few at a time.', ok: 'Restart', done: () => 'restart requested' };
    case 'stop':
      return {
        title: `Stop ${what}?`,
        text: 'Every object of it leaves the member clusters and its quota is released. The workload is kept: start it to run it again.',
        ok: 'Stop',
        danger: true,
        done: () => 'stopped',
      };
    case 'start':
      return {
        title: `Start ${what}?`,
        text: 'It is placed and runs again; the project\'s quota must hold it.',
        ok: 'Start',
        done: () => 'started',
      };
    case 'delete':
      return {
        title: `Delete ${what}?`,
        text: 'Its objects leave every member cluster and the workload is gone. This cannot be undone.',
        ok: 'Delete',
        danger: true,
        done: () => 'deleted',
      };
  }
  return null;
}

// operate asks for op on the shown workload, then calls the API. The
// answer (the workload after the operation) is drawn at once; a refusal
// shows the API's error under the buttons.
async function operate(op) {
  const view = shown;
  const w = view?.workload;
  const text = w && opText(op, w);
  if (!text || view.busy) return;
  const answer = await confirmDialog(text);
  if (!answer || view.signal.aborted) return;
  hide('#op-error');
  view.busy = true;
  renderActions();
  $('#op-status').textContent = `${op}…`;
  try {
    if (op === 'delete') {
      await request(view.base, { method: 'DELETE', signal: view.signal });
      if (view.signal.aborted) return;
      location.hash = `#/p/${enc(view.project)}`;
      return;
    }
    const scale = op === 'scale';
    const res = await request(scale ? `${view.base}/scale` : `${view.base}/${op}`, {
      method: 'POST',
      headers: scale ? { 'Content-Type': 'application/json' } : {},
      body: scale ? JSON.stringify({ replicas: answer.value }) : undefined,
      signal: view.signal,
    });
    const next = await res.json();
    if (view.signal.aborted) return;
    // The gateway answers the cached view, with its status; when the cache
    // lagged it answers the stored document alone: keep the status shown.
    if (!next.status && view.workload?.status) next.status = view.workload.status;
    view.render(next);
    $('#op-status').textContent = `${text.done(next)} · ${clock(new Date())}`;
  } catch (err) {
    if (view.signal.aborted) return;
    if (err.status === 401) return expired(err);
    $('#op-status').textContent = '';
    showIn('#op-error', `${op[0].toUpperCase()}${op.slice(1)} refused. ${describe(err)}`);
  } finally {
    view.busy = false;
    if (shown === view) renderActions();
  }
}

// --- what a kind's status carries ----------------------------------------------
//
// A kind whose status holds more than the counts every kind has gets a card
// in #kind-cards: one kindCard(id, title, applies, fill) call and the id in
// its KIND_VIEWS entry, where fill
// returns the card's content for the workload shown (it may also mark the
// card, e.g. .warn). The cards are made on first use and refilled on every
// render of the workload; a card that does not apply is hidden. An App's
// rollout is read from its own resource, so it has its own card
// (#rollout-card) and poll.

const KIND_CARDS = [];

function kindCard(id, title, applies, fill) {
  KIND_CARDS.push({ id, title, applies, fill });
}

function renderKindCards(w) {
  const root = $('#kind-cards');
  for (const k of KIND_CARDS) {
    let card = root.querySelector(`.card[data-card="${k.id}"]`);
    if (!k.applies(w)) {
      if (card) card.hidden = true;
      continue;
    }
    if (!card) {
      card = el('div', { class: 'card kind-card', 'data-card': k.id }, el('h2', { text: k.title }), el('div', { class: 'kind-body' }));
      root.append(card);
    }
    card.hidden = false;
    card.querySelector('.kind-body').replaceChildren(...[k.fill(w, card)].flat().filter((n) => n !== null && n !== undefined));
  }
}

// metaList is a <dl class="meta"> of the rows with a value; each <dd>
// carries data-field for the browser test.
function metaList(rows) {
  return el(
    'dl',
    { class: 'meta' },
    ...rows.filter(([, , v]) => v !== undefined && v !== null && v !== '').flatMap(([field, k, v]) => [el('dt', { text: k }), el('dd', { 'data-field': field }, v)]),
  );
}

// table is a compact grid table with the given headings and rows.
function gridTable(cls, headings, rows) {
  return el(
    'table',
    { class: `grid compact ${cls}` },
    el('thead', {}, el('tr', {}, ...headings.map(([h, num]) => el('th', { class: num ? 'num' : undefined, text: h })))),
    el('tbody', {}, ...rows),
  );
}

// whenAgo is an absolute time with how long ago it was.
function whenAgo(value) {
  return when(value) ? `${stamp(value)} (${ago(value)})` : '';
}

// A CronJob fires in one member cluster of the region; its status names that
// cluster, when it last fired and last succeeded, and the runs the cluster
// keeps (oldest first in the API, newest first here).
kindCard('cronjob', 'Schedule and runs', (w) => hasCard(w.kind, 'cronjob'), (w) => {
  const c = w.status?.cronJob || {};
  const spec = w.spec || {};
  const runs = [...(c.runs || [])].reverse();
  return [
    metaList([
      ['cluster', 'Cluster', c.cluster || 'not placed yet'],
      ['schedule', 'Schedule', spec.schedule ? `${spec.schedule} (${spec.timeZone || 'UTC'})` : ''],
      ['concurrency', 'Concurrency', spec.concurrencyPolicy || ''],
      ['suspended', 'Suspended', c.suspended || spec.suspend ? 'yes' : 'no'],
      ['last-schedule', 'Last schedule', whenAgo(c.lastScheduleTime) || 'never'],
      ['last-success', 'Last success', whenAgo(c.lastSuccessfulTime) || 'never'],
      ['active', 'Active runs', String(num(c.active))],
    ]),
    el('h2', { class: 'spaced', text: 'Runs' }),
    runs.length
      ? gridTable(
          'cron-runs',
          [['Job'], ['Cluster'], ['Scheduled'], ['Outcome'], ['Succeeded', true], ['Failed', true]],
          runs.map((r) =>
            el(
              'tr',
              { 'data-run': r.name, 'data-outcome': r.outcome },
              el('td', {}, el('code', { text: r.name })),
              el('td', { text: r.cluster || '' }),
              el('td', { title: stamp(r.scheduledTime), text: stamp(r.scheduledTime) }),
              el('td', { class: `outcome ${r.outcome === 'Failed' ? 'bad-text' : r.outcome === 'Succeeded' ? 'ok-text' : ''}`, text: r.outcome }),
              el('td', { class: 'num', text: String(num(r.succeeded)) }),
              el('td', { class: 'num', text: String(num(r.failed)) }),
            ),
          ),
        )
      : el('p', { class: 'muted runs-empty', text: 'No runs kept.' }),
  ];
});

// A Config's keys: each a variable (data) or a file (files), with its size.
kindCard('config', 'Keys', (w) => hasCard(w.kind, 'config'), (w) => {
  const spec = w.spec || {};
  const rows = [
    ...Object.entries(spec.data || {}).map(([k, v]) => [k, 'variable', v]),
    ...Object.entries(spec.files || {}).map(([k, v]) => [k, 'file', v]),
  ].sort(([a], [b]) => a.localeCompare(b));
  return rows.length
    ? gridTable(
        'config-keys',
        [['Key'], ['As'], ['Bytes', true]],
        rows.map(([k, as, v]) =>
          el('tr', { 'data-key': k }, el('td', {}, el('code', { text: k })), el('td', { text: as }), el('td', { class: 'num', text: String(new TextEncoder().encode(v).length) })),
        ),
      )
    : el('p', { class: 'muted', text: 'No keys.' });
});

// A Secret's values are never returned by the API once written: its card
// shows its keys, the version of its values, their digest (it tells
// versions apart), and who wrote them and when.
kindCard('secret', 'Keys and version', (w) => hasCard(w.kind, 'secret'), (w) => {
  const spec = w.spec || {};
  return [
    metaList([
      ['keys', 'Keys', (spec.keys || []).join(', ') || 'none'],
      ['version', 'Version', spec.version ? String(spec.version) : ''],
      ['digest', 'Digest', spec.digest ? el('code', { text: spec.digest }) : ''],
      ['updated-by', 'Written by', spec.updatedBy || ''],
      ['updated', 'Written', whenAgo(spec.updated)],
    ]),
    el('p', { class: 'muted', text: 'Its values are sealed and never shown: write them again (all keys) to change them.' }),
  ];
});

// A Daemon runs a DaemonSet in every matching member cluster; its status
// sums them and names the clusters that are behind (not every pod updated
// and ready), which are highlighted.
kindCard('daemon', 'DaemonSets per cluster', (w) => hasCard(w.kind, 'daemon'), (w, card) => {
  const d = w.status?.daemon || {};
  const behind = new Set(d.behind || []);
  const clusters = d.clusters || {};
  const names = [...new Set([...Object.keys(clusters), ...behind])].sort();
  card.classList.toggle('warn', behind.size > 0);
  const counts = (c) => ['desired', 'current', 'ready', 'updated'].map((f) => el('td', { class: 'num', 'data-field': f, text: String(num(c[f])) }));
  return [
    metaList([
      ['ready', 'Ready', `${num(d.ready)} of ${num(d.desired)} pods, ${num(d.updated)} updated`],
      ['behind', 'Behind', behind.size ? [...behind].sort().join(', ') : 'none'],
    ]),
    gridTable(
      'daemon-clusters',
      [['Cluster'], ['Desired', true], ['Current', true], ['Ready', true], ['Updated', true], ['State']],
      [
        ...names.map((n) =>
          el(
            'tr',
            { 'data-cluster': n, 'data-behind': String(behind.has(n)), class: behind.has(n) ? 'behind' : undefined },
            el('td', { text: n }),
            ...counts(clusters[n] || {}),
            el('td', { class: behind.has(n) ? 'warn-text' : 'muted', text: behind.has(n) ? 'behind' : 'up to date' }),
          ),
        ),
        el('tr', { class: 'total' }, el('td', { text: 'Total' }), ...counts(d), el('td', {})),
      ],
    ),
  ];
});

// A TrainingJob's gang: where it runs, its attempts, requeues and restarts,
// and each rank's pod (status.training).
kindCard('training', 'Gang and ranks', (w) => hasCard(w.kind, 'training'), (w, card) => {
  const g = w.status?.training || {};
  const ranks = [...(g.ranks || [])].sort((a, b) => num(a.rank) - num(b.rank));
  card.classList.toggle('warn', !!when(g.nextAttempt));
  return [
    metaList([
      ['cluster', 'Cluster', g.cluster || 'waiting for a cluster that fits every worker'],
      ['workers', 'Workers', String(num(g.workers))],
      ['attempt', 'Attempt', g.attempt ? String(g.attempt) : ''],
      ['requeues', 'Requeues', g.requeues ? String(g.requeues) : ''],
      ['restarts', 'Gang restarts', g.restarts ? String(g.restarts) : ''],
      ['last-requeue', 'Last requeue', g.lastRequeue || ''],
      ['next-attempt', 'Next attempt', when(g.nextAttempt) ? stamp(g.nextAttempt) : ''],
      ['placed', 'Placed', whenAgo(g.placedAt)],
      ['ready', 'All running', whenAgo(g.readyAt)],
    ]),
    ranks.length
      ? gridTable(
          'training-ranks',
          [['Rank', true], ['Pod'], ['Phase'], ['Node'], ['Restarts', true]],
          ranks.map((r) =>
            el(
              'tr',
              { 'data-rank': String(num(r.rank)), 'data-pod-phase': r.phase },
              el('td', { class: 'num', text: String(num(r.rank)) }),
              el('td', {}, r.pod ? el('code', { text: r.pod }) : '–'),
              el('td', { class: r.phase === 'Failed' ? 'bad-text' : r.phase === 'Running' ? 'ok-text' : '', text: r.phase }),
              el('td', { text: r.node || '' }),
              el('td', { class: 'num', text: String(num(r.restarts)) }),
            ),
          ),
        )
      : el('p', { class: 'muted', text: 'No worker pods yet.' }),
  ];
});

// A Pod's containers (init, sidecars, main) with their image and restart
// count, and its volume claim (status.pod).
kindCard('pod', 'Containers and volume', (w) => hasCard(w.kind, 'pod') && !!w.status?.pod, (w) => {
  const p = w.status?.pod || {};
  const v = p.volume;
  return [
    metaList([
      ['cluster', 'Cluster', p.cluster || ''],
      ['uid', 'Pod UID', p.uid && el('code', { text: p.uid })],
      ['volume', 'Volume', v?.claim ? `${v.claim} · ${v.phase}${v.capacity ? ` · ${v.capacity}` : ''}${v.volumeName ? ` · ${v.volumeName}` : ''}` : ''],
    ]),
    gridTable(
      'pod-containers',
      [['Container'], ['Type'], ['Image'], ['Restarts', true], ['Ready'], ['State']],
      (p.containers || []).map((c) =>
        el(
          'tr',
          { 'data-container': c.name, 'data-type': c.type },
          el('td', { text: c.name }),
          el('td', { text: c.type }),
          el('td', {}, el('code', { text: c.image })),
          el('td', { class: 'num', 'data-field': 'restarts', text: String(num(c.restartCount)) }),
          el('td', { class: c.ready ? 'ok-text' : 'warn-text', text: c.ready ? 'yes' : 'no' }),
          el('td', { text: c.state || '' }),
        ),
      ),
    ),
  ];
});

// --- an App's zone-by-zone rollout ---------------------------------------------

// rollout is what the rollout card draws: the App's last rollout read
// from GET .../rollout, with the App shown (its control says whether a
// pause was asked for).
let rollout = null;

// mayOperate says whether the caller may change the project's workloads
// (developers and admins; viewers read only): buttons they could not use
// are hidden, as the admin-only views are.
function mayOperate(project) {
  const id = session.identity || {};
  return !!id.platformAdmin || ['developer', 'admin'].includes(id.roles?.[project]);
}

function watchRollout(project, name, signal) {
  rollout = { project, name, signal, ro: null, busy: false };
  const view = rollout;
  $('#rollout-zones tbody').replaceChildren();
  $('#rollout-meta').replaceChildren();
  $('#rollout-status').textContent = 'loading…';
  for (const sel of ['#rollout-error', '#rollout-op-error', '#rollout-reason']) hide(sel);
  $('#rollout-empty').hidden = true;
  $('#rollout-actions').hidden = true;
  poll(
    signal,
    async () => {
      await loadRollout(view);
      if (signal.aborted) return;
      hide('#rollout-error');
      $('#rollout-status').textContent = `live · updated ${clock(new Date())}`;
    },
    (err) => {
      showIn('#rollout-error', err);
      return err.status === 403 || err.status === 400;
    },
  );
}

async function loadRollout(view) {
  const ro = await getJSON(`/projects/${enc(view.project)}/apps/${enc(view.name)}/rollout`, { signal: view.signal });
  if (view.signal.aborted || rollout !== view) return;
  view.ro = ro;
  drawRollout();
}

const ROLLOUT_TEXT = {
  pause: { ok: 'Pause', text: 'The rollout holds where it is: no further zone starts until it is resumed.' },
  resume: { ok: 'Resume', text: 'The rollout continues with the next zone; a failed zone is tried again.' },
  undo: { ok: 'Undo', danger: true, text: 'Every zone returns to the stable template; the new one is abandoned until the template changes again.' },
};

// drawRollout renders the rollout card from the last rollout read and the
// App shown.
function drawRollout() {
  const view = rollout;
  const ro = view?.ro;
  if (!ro) return;
  const w = shown?.workload;
  const ctl = w?.control?.rollout || {};
  const phase = ro.phase || 'Complete';
  const zones = ro.zones || [];
  const spec = w?.spec?.rollout || {};
  const paused = phase === 'Paused' || !!ctl.paused;
  $('#rollout-card').dataset.rolloutPhase = phase;
  $('#rollout-card').classList.toggle('warn', phase === 'Paused' || phase === 'RolledBack');
  $('#rollout-phase').dataset.phase = phase;
  $('#rollout-phase').textContent = phase;

  let why = '';
  if (phase === 'Paused') why = `Paused: ${ro.message || 'no reason given'}`;
  else if (phase === 'RolledBack') why = `Rolled back: ${ro.message || ''}`;
  if (ctl.paused && phase !== 'Paused') why = `Pause requested${when(ctl.at) ? ` at ${stamp(ctl.at)}` : ''}; the rollout controller holds it within seconds.`;
  const reason = $('#rollout-reason');
  reason.textContent = why;
  reason.hidden = !why;
  reason.dataset.paused = String(paused);

  $('#rollout-meta').replaceChildren(
    ...metaList([
      ['order', 'Zone order', zones.map((z) => z.zone).join(' → ')],
      ['stable', 'Stable', ro.stable && el('code', { text: ro.stable })],
      ['target', 'Rolling out', ro.target && el('code', { text: ro.target })],
      ['abandoned', 'Abandoned', ro.abandoned && el('code', { text: ro.abandoned })],
      ['policy', 'On failure', spec.onFailure || 'Pause'],
      ['bake', 'Bake', `${spec.bakeSeconds ?? 10}s per zone, deadline ${spec.deadlineSeconds ?? 600}s`],
      ['last-op', 'Last operation', ctl.op ? `${ctl.op}${when(ctl.at) ? ` at ${stamp(ctl.at)}` : ''}` : ''],
      ['updated', 'Updated', stamp(ro.updated)],
    ]).childNodes,
  );
  $('#rollout-zones tbody').replaceChildren(
    ...zones.map((z, i) =>
      el(
        'tr',
        { 'data-zone': z.zone, 'data-state': z.state, class: z.state === 'Failed' || z.state === 'RolledBack' ? 'behind' : undefined },
        el('td', { class: 'num', text: String(i + 1) }),
        el('td', { text: z.zone }),
        el('td', { 'data-field': 'state', class: z.state === 'Failed' ? 'bad-text' : z.state === 'RolledBack' ? 'warn-text' : '', text: z.state }),
        el('td', {}, el('code', { text: z.revision || '' })),
        el('td', { 'data-field': 'started', title: stamp(z.started), text: clock(z.started) }),
        el('td', { 'data-field': 'available', title: stamp(z.availableSince), text: clock(z.availableSince) }),
        el('td', { 'data-field': 'finished', title: stamp(z.finished), text: clock(z.finished) }),
        el('td', { text: z.message || '' }),
      ),
    ),
  );
  $('#rollout-empty').hidden = zones.length > 0;

  $('#rollout-actions').hidden = !mayOperate(view.project);
  $('#rollout-pause').hidden = paused;
  $('#rollout-resume').hidden = !paused;
  $('#rollout-undo').hidden = !ro.target;
  for (const b of ['#rollout-pause', '#rollout-resume', '#rollout-undo']) $(b).disabled = view.busy || !w;
}

// rolloutOp asks, then pauses, resumes or undoes the rollout; the App the
// API answers is drawn at once and the rollout read again.
async function rolloutOp(action) {
  const view = rollout;
  if (!view || view.busy || view.signal.aborted) return;
  const t = ROLLOUT_TEXT[action];
  const answer = await confirmDialog({ title: `${t.ok} the rollout of App ${view.name}?`, text: t.text, ok: t.ok, danger: t.danger });
  if (!answer || view.signal.aborted) return;
  hide('#rollout-op-error');
  view.busy = true;
  drawRollout();
  $('#rollout-status').textContent = `${action}…`;
  try {
    const res = await request(`/projects/${enc(view.project)}/apps/${enc(view.name)}/rollout/${action}`, { method: 'POST', signal: view.signal });
    const next = await res.json();
    if (view.signal.aborted) return;
    if (shown?.render && shown.project === view.project) {
      if (!next.status && shown.workload?.status) next.status = shown.workload.status;
      shown.render(next);
    }
    await loadRollout(view);
    $('#rollout-status').textContent = `${action} requested · ${clock(new Date())}`;
  } catch (err) {
    if (view.signal.aborted) return;
    if (err.status === 401) return expired(err);
    $('#rollout-status').textContent = '';
    showIn('#rollout-op-error', `${t.ok} refused. ${describe(err)}`);
  } finally {
    view.busy = false;
    if (rollout === view) drawRollout();
  }
}

function wireRollout() {
  for (const action of ['pause', 'resume', 'undo']) $(`#rollout-${action}`).addEventListener('click', () => rolloutOp(action));
}

// --- an App's endpoints ---------------------------------------------------------

// watchEndpoints polls an App's endpoints (GET .../endpoints: its region-wide
// address, its Service ports, and every pod with an address in every member
// cluster, ready or not) and draws them per zone and cluster.
function watchEndpoints(base, signal) {
  let last = '';
  for (const sel of ['#endpoints-zones tbody', '#endpoints tbody', '#endpoints-meta']) $(sel).replaceChildren();
  $('#endpoints-summary').textContent = '';
  $('#endpoints-status').textContent = 'loading…';
  $('#endpoints-empty').hidden = true;
  hide('#endpoints-error');
  poll(
    signal,
    async () => {
      const eps = await getJSON(`${base}/endpoints`, { signal });
      if (signal.aborted) return;
      hide('#endpoints-error');
      $('#endpoints-status').textContent = `live · updated ${clock(new Date())}`;
      const snapshot = JSON.stringify(eps);
      if (snapshot === last) return;
      last = snapshot;
      drawEndpoints(eps);
    },
    (err) => {
      showIn('#endpoints-error', err);
      // A 404 may be an App created a moment ago: keep looking.
      return err.status === 403 || err.status === 400;
    },
  );
}

// portText names a Service port as the CLI does: "http 8080/TCP (http)".
function portText(p) {
  return `${p.name} ${p.port}/${p.protocol || 'TCP'}${p.appProtocol ? ` (${p.appProtocol})` : ''}`;
}

function drawEndpoints(eps) {
  const ports = Array.isArray(eps?.ports) ? eps.ports : [];
  const list = Array.isArray(eps?.endpoints) ? eps.endpoints : [];
  const ready = list.filter((e) => e.ready).length;
  const card = $('#endpoints-card');
  card.dataset.ready = String(ready);
  card.dataset.total = String(list.length);
  card.classList.toggle('warn', ready < list.length);
  $('#endpoints-summary').textContent = `${ready} of ${list.length} ready`;
  $('#endpoints-meta').replaceChildren(
    ...metaList([
      ['address', 'Address', eps?.address ? el('code', { text: eps.address }) : 'none (no named container port)'],
      ['ports', 'Ports', ports.map(portText).join(', ')],
    ]).childNodes,
  );
  // Per zone and cluster: how many are ready, how many not.
  const groups = new Map();
  for (const e of list) {
    const k = `${e.zone}\u0000${e.cluster}`;
    const g = groups.get(k) || { zone: e.zone, cluster: e.cluster, ready: 0, notReady: 0 };
    if (e.ready) g.ready++;
    else g.notReady++;
    groups.set(k, g);
  }
  $('#endpoints-zones tbody').replaceChildren(
    ...[...groups.values()].map((g) =>
      el(
        'tr',
        { 'data-zone': g.zone, 'data-cluster': g.cluster },
        el('td', { text: g.zone }),
        el('td', { text: g.cluster }),
        el('td', { class: 'num', 'data-field': 'ready', text: String(g.ready) }),
        el('td', { class: `num ${g.notReady ? 'warn-text' : ''}`, 'data-field': 'notready', text: String(g.notReady) }),
      ),
    ),
  );
  const port = ports.map((p) => `${p.port}/${p.protocol || 'TCP'}`).join(', ');
  $('#endpoints tbody').replaceChildren(
    ...list.map((e) =>
      el(
        'tr',
        { 'data-pod': e.pod, 'data-zone': e.zone, 'data-cluster': e.cluster, 'data-ready': String(!!e.ready), class: e.ready ? undefined : 'behind' },
        el('td', { text: e.zone }),
        el('td', { text: e.cluster }),
        el('td', { 'data-field': 'address' }, el('code', { text: e.ip })),
        el('td', { 'data-field': 'port', text: port }),
        el('td', { class: e.ready ? 'ok-text' : 'warn-text', text: e.ready ? 'yes' : 'no' }),
        el('td', {}, el('code', { text: e.pod })),
        el('td', { text: e.node || '' }),
      ),
    ),
  );
  // Without endpoints the tables would be headings only.
  $('#endpoints-zones').hidden = list.length === 0;
  $('#endpoints').parentElement.hidden = list.length === 0;
  $('#endpoints-empty').hidden = list.length > 0;
}

// --- the confirmation dialog --------------------------------------------------

// pending resolves the open dialog's promise.
let pending = null;

// confirmDialog asks a question in the modal dialog and resolves to
// {value} (the number typed, when it asks for one) or null when cancelled
// (Cancel, Escape, or the view changing underneath).
function confirmDialog({ title, text, ok, danger, input }) {
  closeDialog();
  const dlg = $('#confirm');
  $('#confirm-title').textContent = title;
  $('#confirm-text').textContent = text;
  const okButton = $('#confirm-ok');
  okButton.textContent = ok;
  okButton.classList.toggle('danger', !!danger);
  $('#confirm-replicas-row').hidden = !input;
  const field = $('#confirm-replicas');
  if (input) {
    $('#confirm-replicas-label').textContent = input.label;
    field.value = String(input.value);
    field.min = String(input.min ?? 0);
    if (input.max !== undefined) field.max = String(input.max);
    else field.removeAttribute('max');
  }
  hide('#confirm-invalid');
  dlg.showModal();
  if (input) field.select();
  (input ? field : danger ? $('#confirm-cancel') : okButton).focus();
  return new Promise((resolve) => {
    pending = (v) => {
      pending = null;
      resolve(v);
    };
    pending.input = input;
  });
}

// closeDialog closes the dialog, resolving its question with value (null: cancelled).
function closeDialog(value = null) {
  const p = pending;
  if ($('#confirm').open) $('#confirm').close();
  if (p) p(value);
}

function wireDialog() {
  $('#confirm-form').addEventListener('submit', (e) => {
    e.preventDefault();
    const input = pending?.input;
    if (!input) return closeDialog({});
    const raw = $('#confirm-replicas').value.trim();
    const n = Number(raw);
    const max = input.max;
    if (raw === '' || !Number.isInteger(n) || n < (input.min ?? 0) || (max !== undefined && n > max)) {
      showIn('#confirm-invalid', `Enter a whole number from ${input.min ?? 0}${max !== undefined ? ` to ${max}` : ' up'}.`);
      $('#confirm-replicas').focus();
      return;
    }
    closeDialog({ value: n });
  });
  $('#confirm-cancel').addEventListener('click', () => closeDialog());
  // Escape, or the browser closing it: a cancel (unless it was opened
  // again before this event arrived).
  $('#confirm').addEventListener('close', () => {
    if (!$('#confirm').open) closeDialog();
  });
  for (const sel of OP_BUTTONS) $(sel).addEventListener('click', (e) => operate(e.currentTarget.dataset.op));
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
      if (err.status === 403 || err.status === 400 || (file && err.status === 404)) {
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
// logsPanel streams the containers' output, or a file inside them (from
// the file form) instead: each choice restarts the stream.
function logsPanel(base, signal) {
  let ctl = null;
  const start = (file) => {
    ctl?.abort();
    ctl = new AbortController();
    $('#logs').replaceChildren();
    hide('#logs-error');
    $('#logs-card').dataset.file = file;
    $('#logs-file-clear').hidden = !file;
    tailLogs(base, AbortSignal.any([signal, ctl.signal]), file);
  };
  $('#logs-file').value = '';
  $('#logs-file-form').onsubmit = (ev) => {
    ev.preventDefault();
    start($('#logs-file').value.trim());
  };
  $('#logs-file-clear').onclick = () => {
    $('#logs-file').value = '';
    start('');
    $('#logs-file').focus();
  };
  start('');
}

// tailLogs follows the logs of the workload's containers, or file inside
// them (its lines timed as they are read: a reconnect takes the last line
// again rather than a time).
async function tailLogs(base, signal, file = '') {
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
    if (file) {
      q.set('file', file);
      q.set('tail', lastTime ? '1' : '100');
    } else if (lastTime) q.set('sinceSeconds', String(Math.max(1, Math.ceil((Date.now() - lastTime) / 1000) + 1)));
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

// --- a shell in the browser ----------------------------------------------------
//
// A terminal (xterm.js, copied from npm into vendor/ by `make
// console-assets`; absent, the panel says so) on the exec WebSocket the CLI
// uses: binary messages of one channel byte and data (0 stdin, 1 stdout,
// 2 stderr, 3 exit code, 4 resize as JSON). A browser cannot set an
// Authorization header on a WebSocket: the token goes as the subprotocol
// "base64url.bearer.atoll.dev.<token>" beside "atoll.exec", which the
// gateway selects, and a refusal comes back over the socket as the API's
// error document in a text message, closed with 4000 + its HTTP status.
// Only a workload's own containers are offered (never the platform's
// sidecars); the pods are those its logs name.

const EXEC_PROTOCOL = 'atoll.exec';
const BEARER_PROTOCOL = 'base64url.bearer.atoll.dev.';
const CH_STDIN = 0;
const CH_STDOUT = 1;
const CH_STDERR = 2;
const CH_EXIT = 3;
const CH_RESIZE = 4;

// terminalModules loads xterm.js once: {Terminal, FitAddon}, or throws when
// the assets were not built.
let terminalModules = null;
function loadTerminal() {
  terminalModules ??= (async () => {
    const [xterm, fit] = await Promise.all([import('./vendor/xterm.mjs'), import('./vendor/addon-fit.mjs')]);
    if (!document.querySelector('link[data-xterm]')) {
      document.head.append(el('link', { rel: 'stylesheet', href: 'vendor/xterm.css', 'data-xterm': '1' }));
    }
    return { Terminal: xterm.Terminal, FitAddon: fit.FitAddon };
  })().catch((err) => {
    terminalModules = null;
    throw new Error(`The terminal assets are missing from this console (run \`make console-assets\` before building the gateway): ${err.message}`);
  });
  return terminalModules;
}

// mainContainers are the names of a workload's own containers: every
// "containers" list of its spec (an App's template, a JobSet's jobs), and a
// Pod's main containers as its status lists them. Sidecars and init
// containers are never offered.
function mainContainers(w) {
  const names = new Set();
  const walk = (v, key) => {
    if (Array.isArray(v)) {
      if (key === 'containers') for (const c of v) if (c && typeof c.name === 'string') names.add(c.name);
      for (const x of v) walk(x, '');
    } else if (v && typeof v === 'object') {
      for (const [k, x] of Object.entries(v)) if (k !== 'sidecars' && k !== 'initContainers') walk(x, k);
    }
  };
  walk(w?.spec, '');
  for (const c of w?.status?.pod?.containers || []) if (c.type === 'main' && c.name) names.add(c.name);
  return [...names];
}

// b64url encodes a string as base64url without padding.
function b64url(s) {
  const bytes = new TextEncoder().encode(s);
  let bin = '';
  for (const b of bytes) bin += String.fromCharCode(b);
  return btoa(bin).replace(/\+/g, '-').replace(/\//g, '_').replace(/=+$/, '');
}

// shellPanel wires the Shell card of a workload's page; the session ends
// with the view.
function shellPanel(base, signal) {
  const form = $('#shell-form');
  const podSel = $('#shell-pod');
  const ctrSel = $('#shell-container');
  const status = (t, state) => {
    $('#shell-status').textContent = t;
    $('#shell-card').dataset.state = state;
  };
  let live = null; // {ws, term, fit, observer}
  let containersKey = '';

  hide('#shell-error');
  $('#shell-end').hidden = true;
  delete $('#shell-end').dataset.exitCode;
  $('#shell-term').hidden = true;
  $('#shell-term').replaceChildren();
  podSel.replaceChildren(el('option', { value: '', text: 'any running pod' }));
  ctrSel.replaceChildren();
  status('', 'idle');
  setOpen(false);

  // The containers follow the workload as the detail poll renders it.
  shown.onWorkload = (w) => {
    const names = mainContainers(w);
    const key = names.join('\u0000');
    if (key === containersKey) return;
    containersKey = key;
    const keep = ctrSel.value;
    ctrSel.replaceChildren(...names.map((n) => el('option', { value: n, text: n })));
    if (names.includes(keep)) ctrSel.value = keep;
  };

  // findPods lists the pods the workload's logs name (one line of each).
  const findPods = async () => {
    const found = new Map();
    try {
      const res = await request(`${base}/logs?tail=1`, { headers: { Accept: 'application/x-ndjson' }, signal });
      for await (const line of readLines(res.body)) {
        if (!line.trim()) continue;
        try {
          const rec = JSON.parse(line);
          if (rec.pod) found.set(rec.pod, rec.cluster || '');
        } catch {
          // not a log record
        }
      }
    } catch (err) {
      if (signal.aborted) return;
      if (err.status === 401) return expired(err);
      // No started pod yet, or logs refused: "any running pod" remains.
    }
    const keep = podSel.value;
    podSel.replaceChildren(
      el('option', { value: '', text: 'any running pod' }),
      ...[...found.entries()].sort().map(([pod, cluster]) => el('option', { value: pod, text: cluster ? `${pod} (${cluster})` : pod })),
    );
    if (found.has(keep)) podSel.value = keep;
  };
  findPods();

  function setOpen(open) {
    $('#shell-open').hidden = open;
    $('#shell-close').hidden = !open;
    $('#shell-copy').hidden = !open;
    $('#shell-paste').hidden = !open;
    $('#shell-help').hidden = !open;
    for (const e of [podSel, ctrSel, $('#shell-command'), $('#shell-pods')]) e.disabled = open;
  }

  const copy = () => {
    const text = live?.term.getSelection();
    if (text) navigator.clipboard?.writeText(text).catch((err) => showIn('#shell-error', `Copy: ${err.message}`));
  };
  const paste = () => {
    if (!navigator.clipboard?.readText) return showIn('#shell-error', 'This browser does not let the page read the clipboard: use its Paste (Ctrl+V).');
    navigator.clipboard
      .readText()
      .then((t) => live?.term.paste(t))
      .catch((err) => showIn('#shell-error', `Paste: ${err.message}`));
  };

  // end closes the session and says why, once.
  const end = (text, exitCode) => {
    if (!live) return;
    const s = live;
    live = null;
    s.observer?.disconnect();
    if (s.ws.readyState <= WebSocket.OPEN) s.ws.close(1000, 'closed by the user');
    s.term.options.disableStdin = true;
    s.term.options.cursorBlink = false;
    const e = $('#shell-end');
    e.textContent = text;
    if (exitCode !== undefined) e.dataset.exitCode = String(exitCode);
    else delete e.dataset.exitCode;
    e.hidden = false;
    status('ended', 'ended');
    setOpen(false);
    if (!signal.aborted) $('#shell-open').focus();
  };

  const open = async () => {
    hide('#shell-error');
    $('#shell-end').hidden = true;
    const command = $('#shell-command').value.trim().split(/\s+/).filter(Boolean);
    if (!command.length) return showIn('#shell-error', 'Enter a command, such as sh.');
    if (!ctrSel.value) return showIn('#shell-error', 'This workload has no container to open a shell in.');
    let mods;
    try {
      mods = await loadTerminal();
    } catch (err) {
      return showIn('#shell-error', err.message);
    }
    if (signal.aborted) return;
    const box = $('#shell-term');
    box.replaceChildren();
    box.hidden = false;
    const term = new mods.Terminal({ cursorBlink: true, convertEol: false, fontSize: 13, scrollback: 5000, screenReaderMode: false });
    const fit = new mods.FitAddon();
    term.loadAddon(fit);
    term.open(box);
    try {
      fit.fit();
    } catch {
      // a hidden or zero-sized box: the default 80x24 stays
    }
    term.attachCustomKeyEventHandler((ev) => {
      if (ev.type !== 'keydown' || !ev.ctrlKey || !ev.shiftKey) return true;
      const k = ev.key.toLowerCase();
      if (k === 'c') copy();
      else if (k === 'v') paste();
      else if (k === 'e') $('#shell-close').focus();
      else return true;
      ev.preventDefault();
      return false;
    });

    const q = new URLSearchParams();
    for (const c of command) q.append('command', c);
    q.set('container', ctrSel.value);
    if (podSel.value) q.set('pod', podSel.value);
    q.set('stdin', 'true');
    q.set('tty', 'true');
    const url = new URL(`${API}${base}/exec?${q}`, location.href);
    url.protocol = url.protocol === 'https:' ? 'wss:' : 'ws:';
    const ws = new WebSocket(url, [EXEC_PROTOCOL, BEARER_PROTOCOL + b64url(session.token)]);
    ws.binaryType = 'arraybuffer';
    live = { ws, term, fit, observer: null };
    const me = live;
    setOpen(true);
    status('connecting…', 'connecting');
    const where = `${podSel.value || 'a running pod'}/${ctrSel.value}`;
    let exitCode;
    let refusal = null;
    let opened = false;
    const encoder = new TextEncoder();
    const send = (ch, bytes) => {
      if (ws.readyState !== WebSocket.OPEN) return;
      const msg = new Uint8Array(bytes.length + 1);
      msg[0] = ch;
      msg.set(bytes, 1);
      ws.send(msg);
    };
    const sendSize = () => send(CH_RESIZE, encoder.encode(JSON.stringify({ width: term.cols, height: term.rows })));
    ws.onopen = () => {
      opened = true;
      status(`connected to ${where}`, 'open');
      sendSize();
      term.focus();
    };
    term.onData((d) => send(CH_STDIN, encoder.encode(d)));
    term.onBinary((d) => send(CH_STDIN, Uint8Array.from(d, (c) => c.charCodeAt(0) & 0xff)));
    term.onResize(sendSize);
    me.observer = new ResizeObserver(() => {
      try {
        fit.fit();
      } catch {
        // the box is hidden
      }
    });
    me.observer.observe(box);
    ws.onmessage = (ev) => {
      if (typeof ev.data === 'string') {
        // A refusal: the API's error document.
        try {
          refusal = JSON.parse(ev.data);
        } catch {
          refusal = { message: ev.data };
        }
        return;
      }
      const b = new Uint8Array(ev.data);
      if (!b.length) return;
      const data = b.subarray(1);
      if (b[0] === CH_STDOUT || b[0] === CH_STDERR) term.write(data);
      else if (b[0] === CH_EXIT) exitCode = parseInt(new TextDecoder().decode(data), 10);
    };
    ws.onclose = (ev) => {
      if (live !== me) return;
      // Said once the output before the end is in the terminal.
      if (Number.isInteger(exitCode)) return term.write('', () => end(`Session ended: exit code ${exitCode}.`, exitCode));
      if (ev.code >= 4400 && ev.code < 4600) {
        const err = new APIError(ev.code - 4000, refusal, ev.reason || `refused (${ev.code - 4000})`);
        showIn('#shell-error', `The shell was refused: ${describe(err)}`);
        return end(`No session: refused with ${ev.code - 4000}.`);
      }
      if (!opened) return end('The shell could not be opened: the gateway cannot be reached or refused the connection.');
      end(`Session ended without an exit code${ev.reason ? `: ${ev.reason}` : ''} (WebSocket ${ev.code}).`);
    };
  };

  form.onsubmit = (ev) => {
    ev.preventDefault();
    if (!live) open();
  };
  $('#shell-close').onclick = () => end('Session ended by you.');
  $('#shell-copy').onclick = copy;
  $('#shell-paste').onclick = paste;
  $('#shell-pods').onclick = () => findPods();
  signal.addEventListener('abort', () => {
    if (live) end('Session ended: you left the page.');
    shown && (shown.onWorkload = null);
  });
}

// --- the region ----------------------------------------------------------------

// regionView draws the SLIs for everyone and, for platform admins, the
// member clusters by zone: health, cordon, and per pool the capacity and
// what is requested of it as bars.
function regionView(signal) {
  show('region-view');
  document.title = 'Region · Atoll console';
  const admin = !!session.identity.platformAdmin;
  for (const sel of ['#region-error', '#slis-error']) hide(sel);
  $('#region-note').hidden = admin;
  $('#region-empty').hidden = true;
  $('#region-status').textContent = 'loading…';
  $('#region-zones').replaceChildren();
  clusterCards.clear();
  if (admin) {
    poll(
      signal,
      async () => {
        const list = await getJSON('/clusters', { signal });
        if (signal.aborted) return;
        renderRegion(list.items || [], signal);
        hide('#region-error');
        $('#region-status').textContent = `live · updated ${clock(new Date())}`;
      },
      (err) => {
        showIn('#region-error', err);
        const final = err.status === 403;
        $('#region-status').textContent = final ? '' : 'retrying…';
        return final;
      },
    );
  } else {
    $('#region-status').textContent = '';
  }
  poll(
    signal,
    async () => {
      const h = await getJSON('/slis', { signal });
      if (signal.aborted) return;
      renderSLIs(h);
      hide('#slis-error');
    },
    (err) => {
      showIn('#slis-error', err);
      return err.status === 403 || err.status === 404;
    },
    SLI_POLL_MS,
  );
}

// clusterCards holds each cluster's card by name, so a poll updates the
// cards in place (their buttons stay put under the pointer).
const clusterCards = new Map();

const GiB = 1024 ** 3;
const MiB = 1024 ** 2;

function cores(milli) {
  const c = num(milli) / 1000;
  return c >= 100 || Number.isInteger(c) ? String(Math.round(c)) : c.toFixed(c >= 10 ? 1 : 2);
}

function bytes(b) {
  b = num(b);
  if (b >= GiB) return `${(b / GiB).toFixed(b >= 100 * GiB ? 0 : 1)} GiB`;
  return `${Math.round(b / MiB)} MiB`;
}

// bar is one resource of a pool: what is requested of what is allocatable.
function bar(resource, label, used, capacity, fmt, unit = '') {
  used = num(used);
  capacity = num(capacity);
  const pct = capacity > 0 ? Math.min(100, (used / capacity) * 100) : 0;
  const fill = el('div', { class: 'bar-fill' });
  fill.style.width = `${pct.toFixed(1)}%`;
  const level = pct >= 90 ? 'full' : pct >= 75 ? 'high' : used > 0 ? 'some' : '';
  return el(
    'div',
    { class: `bar-row ${level}`, 'data-resource': resource, 'data-used': used, 'data-capacity': capacity },
    el('span', { class: 'bar-label', text: label }),
    el(
      'div',
      {
        class: 'bar',
        role: 'meter',
        'aria-label': `${label} requested`,
        'aria-valuemin': 0,
        'aria-valuemax': capacity,
        'aria-valuenow': Math.min(used, capacity),
      },
      fill,
    ),
    el('span', { class: 'bar-value', text: `${fmt(used)} / ${fmt(capacity)}${unit} · ${Math.round(pct)}%` }),
  );
}

function poolView(name, p) {
  const alloc = p.allocatable || {};
  const req = p.requested || {};
  const nodes = num(p.nodes);
  const ready = num(p.readyNodes);
  const bars = [
    bar('cpu', 'CPU', req.milliCPU, alloc.milliCPU, cores, ' cores'),
    bar('memory', 'Memory', req.memoryBytes, alloc.memoryBytes, bytes),
  ];
  if (num(alloc.gpus) > 0 || num(req.gpus) > 0) bars.push(bar('gpus', 'GPUs', req.gpus, alloc.gpus, String));
  bars.push(bar('pods', 'Pods', req.pods, alloc.pods, String));
  return el(
    'div',
    { class: 'pool', 'data-pool': name },
    el(
      'div',
      { class: 'pool-head' },
      el('span', { class: 'pool-name', text: name }),
      p.tier ? el('span', { class: 'badge', text: p.tier }) : null,
      p.gpuType ? el('span', { class: 'badge gpu', text: p.gpuType }) : null,
      el('span', { class: `nodes ${ready < nodes ? 'warn-text' : 'muted'}`, 'data-nodes': nodes, 'data-ready-nodes': ready, text: `${ready} / ${nodes} nodes ready` }),
    ),
    ...bars,
  );
}

// clusterCard returns the card of cluster name, made on first use.
function clusterCard(name, signal) {
  let card = clusterCards.get(name);
  if (card) return card;
  const button = el('button', { type: 'button', class: 'secondary cordon', 'data-cluster': name, 'data-op': 'cordon', text: 'Cordon' });
  button.addEventListener('click', () => cordon(name, button.dataset.op, card, signal));
  const editButton = el('button', { type: 'button', class: 'secondary labels-edit', 'data-cluster': name, 'aria-expanded': 'false', text: 'Edit labels' });
  editButton.addEventListener('click', () => openLabelsForm(card));
  const form = labelsForm(name, () => card, signal);
  card = el(
    'article',
    { class: 'card cluster', 'data-cluster': name },
    el(
      'div',
      { class: 'cluster-head' },
      el('h3', { text: name }),
      el('span', { class: 'badge health' }),
      el('span', { class: 'badge cordoned', text: 'cordoned' }),
      el('span', { class: 'seen muted' }),
      button,
      editButton,
    ),
    el('p', { class: 'cluster-message muted' }),
    el('div', { class: 'labels cluster-labels' }),
    form,
    el('div', { class: 'pools' }),
    el('p', { class: 'error cluster-error', role: 'alert', hidden: true }),
  );
  clusterCards.set(name, card);
  return card;
}

function updateCluster(card, c) {
  card.cluster = c;
  card.dataset.healthy = String(!!c.healthy);
  card.dataset.cordoned = String(!!c.cordoned);
  card.dataset.zone = c.zone || '';
  const health = card.querySelector('.health');
  health.textContent = c.healthy ? 'healthy' : 'unhealthy';
  health.dataset.healthy = String(!!c.healthy);
  card.querySelector('.cordoned').hidden = !c.cordoned;
  const seen = card.querySelector('.seen');
  seen.textContent = c.lastSeen && when(c.lastSeen) ? `seen ${ago(c.lastSeen)}` : '';
  seen.title = stamp(c.lastSeen);
  const button = card.querySelector('button.cordon');
  setOp(button, c.cordoned ? 'uncordon' : 'cordon', c.cordoned ? 'Uncordon' : 'Cordon');
  const msg = card.querySelector('.cluster-message');
  msg.textContent = c.message || '';
  msg.hidden = !c.message;
  msg.classList.toggle('bad-text', !c.healthy);
  const labels = Object.entries(c.labels || {}).sort(([a], [b]) => a.localeCompare(b));
  card.querySelector('.cluster-labels').replaceChildren(...labels.flatMap(([k, v]) => [el('code', { text: `${k}=${v}` }), ' ']));
  const pools = Object.keys(c.pools || {}).sort();
  const snapshot = JSON.stringify(pools.map((p) => [p, c.pools[p]]));
  const box = card.querySelector('.pools');
  if (box.dataset.snapshot !== snapshot) {
    box.dataset.snapshot = snapshot;
    box.replaceChildren(...pools.map((p) => poolView(p, c.pools[p])));
    if (!pools.length) box.append(el('p', { class: 'muted', text: 'No node pools reported.' }));
  }
}

// renderRegion groups the clusters by zone, each zone a section with its
// clusters' cards and a total.
function renderRegion(clusters, signal) {
  const zones = new Map();
  for (const c of clusters) {
    const z = c.zone || '(no zone)';
    if (!zones.has(z)) zones.set(z, []);
    zones.get(z).push(c);
  }
  const names = new Set(clusters.map((c) => c.name));
  for (const n of [...clusterCards.keys()]) if (!names.has(n)) clusterCards.delete(n);
  const root = $('#region-zones');
  const sections = [...zones.keys()].sort().map((z) => {
    const list = zones.get(z).sort((a, b) => a.name.localeCompare(b.name));
    let section = [...root.children].find((s) => s.dataset.zone === z);
    if (!section) {
      section = el('section', { class: 'zone', 'data-zone': z }, el('div', { class: 'heading' }, el('h2', { text: `Zone ${z}` }), el('span', { class: 'zone-summary muted' })), el('div', { class: 'cluster-grid' }));
    }
    let cpuUsed = 0;
    let cpuCap = 0;
    let nodes = 0;
    let ready = 0;
    for (const c of list) {
      for (const p of Object.values(c.pools || {})) {
        cpuUsed += num(p.requested?.milliCPU);
        cpuCap += num(p.allocatable?.milliCPU);
        nodes += num(p.nodes);
        ready += num(p.readyNodes);
      }
    }
    const healthy = list.filter((c) => c.healthy).length;
    section.querySelector('.zone-summary').textContent =
      `${list.length} cluster${list.length === 1 ? '' : 's'} · ${healthy} healthy · ${ready}/${nodes} nodes ready · CPU ${cpuCap ? Math.round((cpuUsed / cpuCap) * 100) : 0}% requested`;
    const grid = section.querySelector('.cluster-grid');
    const cards = list.map((c) => {
      const card = clusterCard(c.name, signal);
      updateCluster(card, c);
      return card;
    });
    cards.forEach((card, i) => {
      if (grid.children[i] !== card) grid.insertBefore(card, grid.children[i] || null);
    });
    while (grid.children.length > cards.length) grid.lastElementChild.remove();
    return section;
  });
  sections.forEach((sec, i) => {
    if (root.children[i] !== sec) root.insertBefore(sec, root.children[i] || null);
  });
  while (root.children.length > sections.length) root.lastElementChild.remove();
  $('#region-empty').hidden = clusters.length > 0;
}

// cordon asks, then cordons or uncordons a cluster; the card shows the
// cluster the API answers, or its refusal.
async function cordon(name, action, card, signal) {
  const cordoning = action === 'cordon';
  const answer = await confirmDialog({
    title: `${cordoning ? 'Cordon' : 'Uncordon'} cluster ${name}?`,
    text: cordoning
      ? 'The scheduler places no new shards on it; what runs there stays. Failover still moves shards off it if it turns unhealthy.'
      : 'The scheduler may place shards on it again.',
    ok: cordoning ? 'Cordon' : 'Uncordon',
    danger: cordoning,
  });
  if (!answer || signal.aborted) return;
  const err = card.querySelector('.cluster-error');
  err.hidden = true;
  const button = card.querySelector('button.cordon');
  button.disabled = true;
  try {
    const c = await getJSON(`/clusters/${enc(name)}/${action}`, { method: 'POST', signal });
    if (signal.aborted) return;
    updateCluster(card, c);
  } catch (e) {
    if (signal.aborted) return;
    if (e.status === 401) return expired(e);
    err.textContent = `${cordoning ? 'Cordon' : 'Uncordon'} refused. ${describe(e)}`;
    err.hidden = false;
  } finally {
    button.disabled = false;
  }
}

// --- the workload editor --------------------------------------------------------
//
// A YAML or JSON document in CodeMirror (bundled into vendor/editor.mjs by
// `make console-assets`; absent, the page says so), for a new workload
// (from one of deploy/examples, copied into vendor/examples) or an existing
// one (its stored document). Review shows the line diff against the stored
// document (nothing, for a new one); Apply does what `atoll apply` does:
// create, and update when it exists. The API's 422 field paths are marked
// at their lines.

let editorModule = null;
let cmView = null;

function loadEditor() {
  editorModule ??= import('./vendor/editor.mjs').catch((err) => {
    editorModule = null;
    throw new Error(`The editor's assets are missing from this console (run \`make console-assets\` before building the gateway): ${err.message}`);
  });
  return editorModule;
}

// storedDocument is the document of a workload as the API holds it, less
// what admission adds and a user may not write (the platform's sidecars).
function storedDocument(w) {
  const md = w.metadata || {};
  const meta = { project: md.project, name: md.name };
  if (md.labels && Object.keys(md.labels).length) meta.labels = md.labels;
  const strip = (v) => {
    if (Array.isArray(v)) return v.map(strip);
    if (!v || typeof v !== 'object') return v;
    return Object.fromEntries(Object.entries(v).filter(([k]) => k !== 'sidecars').map(([k, x]) => [k, strip(x)]));
  };
  return { apiVersion: w.apiVersion || 'atoll.dev/v1', kind: w.kind, metadata: meta, spec: strip(w.spec) };
}

async function editorView(project, kind, name, signal) {
  show('editor-view');
  const editing = !!name;
  document.title = `${editing ? `Edit ${name}` : 'New workload'} · ${project} · Atoll console`;
  $('#editor-title').textContent = editing ? `Edit ${kind} ${name}` : `New workload in ${project}`;
  $('#editor-back').href = editing ? `#/p/${enc(project)}/${enc(kind)}/${enc(name)}` : `#/p/${enc(project)}`;
  $('#editor-example-row').hidden = editing;
  $('#editor-load').hidden = editing;
  for (const sel of ['#editor-error']) hide(sel);
  $('#editor-fields').hidden = true;
  $('#editor-diff-card').hidden = true;
  $('#editor-apply').hidden = true;
  $('#editor-reset').hidden = true;
  const status = (t) => ($('#editor-status').textContent = t);
  status('loading…');
  let ed;
  try {
    ed = await loadEditor();
  } catch (err) {
    status('');
    return showIn('#editor-error', err.message);
  }
  if (signal.aborted) return;
  if (!cmView) {
    cmView = ed.createEditor($('#editor'), '');
    $('#editor').editorView = cmView; // for the browser test
  }
  const view = cmView;
  let original = ''; // the text loaded: Undo my edits brings it back
  let reviewed = null; // {value, text} once reviewed and unchanged since

  const stored = async () => {
    if (!editing) return null;
    return getJSON(`/projects/${enc(project)}/workloads/${enc(kind)}/${enc(name)}`, { signal });
  };
  const load = (text) => {
    original = text;
    ed.setText(view, text);
    ed.showErrors(view, []);
    reviewed = null;
    $('#editor-apply').hidden = true;
    $('#editor-diff-card').hidden = true;
    $('#editor-fields').hidden = true;
  };
  const loadExample = async () => {
    hide('#editor-error');
    const ex = $('#editor-example').value;
    try {
      const res = await fetch(`vendor/examples/${enc(ex)}.yaml`, { cache: 'no-store' });
      if (!res.ok) throw new Error(`example ${ex}: ${res.status}`);
      const text = (await res.text()).replace(/^(\s+project:\s*).*$/m, `$1${project}`);
      if (!signal.aborted) load(text);
      status(`from deploy/examples/${ex}.yaml`);
    } catch (err) {
      showIn('#editor-error', `The examples are missing from this console: ${err.message}`);
    }
  };
  // fieldErrors marks errors [{line, field, message}] in the editor and lists them.
  const fieldErrors = (errs) => {
    ed.showErrors(view, errs.map((e) => ({ line: e.line, message: e.field ? `${e.field}: ${e.message}` : e.message })));
    const list = $('#editor-fields');
    list.replaceChildren(
      ...errs.map((e) => {
        const b = el('button', { type: 'button', text: `line ${e.line}${e.field ? ` · ${e.field}` : ''}: ${e.message}` });
        b.addEventListener('click', () => {
          const line = view.state.doc.line(Math.min(e.line, view.state.doc.lines));
          view.dispatch({ selection: { anchor: line.from }, scrollIntoView: true });
          view.focus();
        });
        return el('li', { 'data-line': String(e.line), 'data-field': e.field || '' }, b);
      }),
    );
    list.hidden = errs.length === 0;
  };

  const review = async () => {
    hide('#editor-error');
    fieldErrors([]);
    $('#editor-apply').hidden = true;
    const text = ed.getText(view);
    const parsed = ed.parse(text);
    if (parsed.errors.length) {
      status('');
      return fieldErrors(parsed.errors.map((e) => ({ line: e.line, message: e.message })));
    }
    if (!parsed.value || typeof parsed.value !== 'object' || Array.isArray(parsed.value)) {
      return showIn('#editor-error', 'The document must be one workload: a map with apiVersion, kind, metadata and spec.');
    }
    const doc = parsed.value;
    doc.metadata = { ...(doc.metadata || {}) };
    doc.metadata.project ??= project;
    let before = '';
    try {
      const w = await stored();
      if (w) before = ed.stringify(storedDocument(w));
    } catch (err) {
      if (signal.aborted) return;
      return showIn('#editor-error', err);
    }
    if (signal.aborted) return;
    const after = ed.stringify(doc);
    const diff = ed.diffLines(before, after);
    const changed = diff.filter((d) => d.op !== ' ').length;
    $('#editor-diff').replaceChildren(
      ...diff.map((d) => el('span', { class: d.op === '+' ? 'add' : d.op === '-' ? 'del' : 'same', 'data-op': d.op, text: `${d.op} ${d.text}` })),
    );
    $('#editor-diff-card').hidden = false;
    if (!changed) {
      status('no change to apply');
      return;
    }
    reviewed = { doc, text, parsed };
    $('#editor-apply').hidden = false;
    status(`${changed} line${changed === 1 ? '' : 's'} changed: review them, then Apply`);
    $('#editor-apply').focus();
  };

  const apply = async () => {
    if (!reviewed || reviewed.text !== ed.getText(view)) return review();
    const { doc, parsed } = reviewed;
    const body = JSON.stringify(doc);
    const json = { 'Content-Type': 'application/json' };
    $('#editor-apply').disabled = true;
    status('applying…');
    try {
      let verb = 'created';
      let w;
      try {
        w = await getJSON(`/projects/${enc(project)}/workloads`, { method: 'POST', body, headers: json, signal });
      } catch (err) {
        if (err.status !== 409 || err.code !== 'AlreadyExists') throw err;
        verb = 'updated';
        w = await getJSON(`/projects/${enc(project)}/workloads/${enc(doc.kind)}/${enc(doc.metadata?.name ?? '')}`, { method: 'PUT', body, headers: json, signal });
      }
      if (signal.aborted) return;
      status(`${doc.kind} ${doc.metadata?.name} ${verb}`);
      location.hash = `#/p/${enc(project)}/${enc(w?.kind || doc.kind)}/${enc(w?.metadata?.name || doc.metadata?.name)}`;
    } catch (err) {
      if (signal.aborted) return;
      if (err.status === 401) return expired(err);
      status('');
      $('#editor-apply').hidden = true;
      reviewed = null;
      if (err.fields?.length) {
        fieldErrors(err.fields.map((f) => ({ line: parsed.lineOf(f.field), field: f.field, message: f.reason })));
        showIn('#editor-error', `Not applied: ${err.code}: ${err.message}`);
      } else showIn('#editor-error', `Not applied: ${describe(err)}`);
    } finally {
      $('#editor-apply').disabled = false;
    }
  };

  $('#editor-form').onsubmit = (ev) => {
    ev.preventDefault();
    review();
  };
  $('#editor-apply').onclick = () => apply();
  $('#editor-load').onclick = () => loadExample();
  $('#editor-reset').hidden = false;
  $('#editor-reset').onclick = () => load(original);

  if (editing) {
    try {
      const w = await stored();
      if (signal.aborted) return;
      load(ed.stringify(storedDocument(w)));
      status(`generation ${w.metadata?.generation ?? ''} as stored`);
    } catch (err) {
      if (signal.aborted) return;
      status('');
      showIn('#editor-error', err);
    }
  } else {
    await loadExample();
  }
}

// --- operators' edits: cluster labels and project quota --------------------------

// BUFFER_LABEL is the cluster label of the burst buffer (libs/api
// LabelBufferPercent): the share of each pool OnDemand and Preemptible
// placements leave free.
const BUFFER_LABEL = 'scheduling.atoll.dev/buffer-percent';

// labelsForm is a cluster card's form: the burst buffer, then the other
// labels as key=value lines.
function labelsForm(name, card, signal) {
  const form = el(
    'form',
    { class: 'labels-form shell-form', hidden: true, 'aria-label': `Labels of cluster ${name}` },
    el('label', {}, 'Burst buffer (% of each pool; empty: the default)', el('input', { class: 'buffer', type: 'number', min: '0', max: '100', step: '1', inputmode: 'numeric' })),
    el('label', {}, 'Other labels (key=value, one a line)', el('textarea', { class: 'labels-text', rows: '4', spellcheck: 'false' })),
    el('button', { type: 'submit', class: 'labels-save', text: 'Change labels…' }),
    el('button', { type: 'button', class: 'secondary labels-cancel', text: 'Cancel' }),
  );
  const close = () => {
    form.hidden = true;
    const b = card().querySelector('button.labels-edit');
    b.setAttribute('aria-expanded', 'false');
    b.focus();
  };
  form.querySelector('.labels-cancel').addEventListener('click', close);
  form.addEventListener('keydown', (ev) => {
    if (ev.key === 'Escape') close();
  });
  form.addEventListener('submit', async (ev) => {
    ev.preventDefault();
    const c = card();
    const err = c.querySelector('.cluster-error');
    err.hidden = true;
    const current = c.cluster?.labels || {};
    const want = {};
    for (const [i, raw] of form.querySelector('.labels-text').value.split('\n').entries()) {
      const line = raw.trim();
      if (!line) continue;
      const eq = line.indexOf('=');
      if (eq <= 0) {
        err.textContent = `Line ${i + 1} "${line}" is not key=value.`;
        err.hidden = false;
        return;
      }
      want[line.slice(0, eq).trim()] = line.slice(eq + 1).trim();
    }
    delete want[BUFFER_LABEL];
    const buffer = form.querySelector('.buffer').value.trim();
    if (buffer !== '') want[BUFFER_LABEL] = buffer;
    const set = {};
    const remove = [];
    const lines = [];
    for (const [k, v] of Object.entries(want).sort()) {
      if (!(k in current)) lines.push(`+ ${k}=${v}`);
      else if (current[k] !== v) lines.push(`~ ${k}: ${current[k]} → ${v}`);
      else continue;
      set[k] = v;
    }
    for (const k of Object.keys(current).sort()) {
      if (!(k in want)) {
        remove.push(k);
        lines.push(`− ${k} (was ${current[k]})`);
      }
    }
    if (!lines.length) {
      err.textContent = 'Nothing to change: the labels are as they are.';
      err.hidden = false;
      return;
    }
    const answer = await confirmDialog({
      title: `Change the labels of cluster ${name}?`,
      text: `${lines.join('\n')}\n\nThe scheduler reads them at its next decision; the change is audited.`,
      ok: 'Change labels',
    });
    if (!answer || signal.aborted) return;
    const save = form.querySelector('.labels-save');
    save.disabled = true;
    try {
      const updated = await getJSON(`/clusters/${enc(name)}/labels`, {
        method: 'PATCH',
        body: JSON.stringify({ set, remove }),
        headers: { 'Content-Type': 'application/json' },
        signal,
      });
      if (signal.aborted) return;
      updateCluster(c, updated);
      close();
    } catch (e) {
      if (signal.aborted) return;
      if (e.status === 401) return expired(e);
      err.textContent = `Labels refused. ${describe(e)}`;
      err.hidden = false;
    } finally {
      save.disabled = false;
    }
  });
  return form;
}

// openLabelsForm fills a cluster card's labels form from the cluster as
// last read, and shows it.
function openLabelsForm(card) {
  const form = card.querySelector('.labels-form');
  const labels = card.cluster?.labels || {};
  form.querySelector('.buffer').value = labels[BUFFER_LABEL] ?? '';
  form.querySelector('.labels-text').value = Object.entries(labels)
    .filter(([k]) => k !== BUFFER_LABEL)
    .sort(([a], [b]) => a.localeCompare(b))
    .map(([k, v]) => `${k}=${v}`)
    .join('\n');
  form.hidden = false;
  card.querySelector('button.labels-edit').setAttribute('aria-expanded', 'true');
  form.querySelector('.buffer').focus();
}

// QUOTA_FIELDS are the quota form's inputs: the API's resource, its input,
// its unit in the form and how a limit is written in a confirmation.
const QUOTA_FIELDS = [
  { key: 'milliCPU', sel: '#quota-cpu', unit: 1, label: 'CPU', show: (v) => `${v}m` },
  { key: 'memoryBytes', sel: '#quota-memory', unit: 1 << 20, label: 'Memory', show: (v) => bytes(v) },
  { key: 'storageBytes', sel: '#quota-storage', unit: 1 << 30, label: 'Storage', show: (v) => bytes(v) },
  { key: 'gpus', sel: '#quota-gpus', unit: 1, label: 'GPUs', show: String },
  { key: 'pods', sel: '#quota-pods', unit: 1, label: 'Pods', show: String },
];

// quotaEditor is the project page's quota form, for platform admins: one
// tier's limit, filled from the quota as polled until the admin types.
const quotaEditor = {
  project: '',
  quota: null,
  dirty: false,
  wired: false,
  reset() {
    this.project = '';
    this.quota = null;
    this.dirty = false;
    $('#quota-form').hidden = true;
    $('#quota-help').hidden = true;
    $('#quota-status').textContent = '';
    hide('#quota-error');
  },
  limitOf(tier) {
    return this.quota?.tiers?.find((t) => t.tier === tier)?.limit || {};
  },
  fill() {
    const lim = this.limitOf($('#quota-tier').value);
    for (const f of QUOTA_FIELDS) $(f.sel).value = String(Math.round((num(lim[f.key]) / f.unit) * 100) / 100);
    this.dirty = false;
  },
  show(project, q, signal) {
    if (!session.identity?.platformAdmin) return;
    const first = this.project !== project;
    this.project = project;
    this.quota = q;
    this.signal = signal;
    if (!this.wired) this.wire();
    $('#quota-card').hidden = false;
    $('#quota-form').hidden = false;
    $('#quota-help').hidden = false;
    if (first || !this.dirty) this.fill();
  },
  wire() {
    this.wired = true;
    $('#quota-tier').addEventListener('change', () => this.fill());
    for (const f of QUOTA_FIELDS) $(f.sel).addEventListener('input', () => (this.dirty = true));
    $('#quota-form').addEventListener('submit', (ev) => {
      ev.preventDefault();
      this.save();
    });
  },
  async save() {
    const project = this.project;
    const signal = this.signal;
    const tier = $('#quota-tier').value;
    hide('#quota-error');
    const old = this.limitOf(tier);
    const body = {};
    const lines = [];
    for (const f of QUOTA_FIELDS) {
      const raw = $(f.sel).value.trim();
      const v = raw === '' ? 0 : Math.round(Number(raw) * f.unit);
      if (!Number.isFinite(v) || v < 0) return showIn('#quota-error', `${f.label}: "${raw}" is not an amount of 0 or more.`);
      body[f.key] = v;
      const was = num(old[f.key]);
      if (v !== was) lines.push(`${f.label}: ${was ? f.show(was) : 'none'} → ${v ? f.show(v) : 'none (forbidden)'}`);
    }
    if (!lines.length) return showIn('#quota-error', `Nothing to change: the ${tier} limit is as it is.`);
    const answer = await confirmDialog({
      title: `Change the ${tier} quota of project ${project}?`,
      text: `${lines.join('\n')}\n\nWorkloads already admitted keep running; new ones are admitted against the new limit. The change is audited.`,
      ok: 'Change quota',
    });
    if (!answer || signal?.aborted) return;
    $('#quota-save').disabled = true;
    try {
      const q = await getJSON(`/projects/${enc(project)}/quota/${enc(tier)}`, {
        method: 'PUT',
        body: JSON.stringify(body),
        headers: { 'Content-Type': 'application/json' },
        signal,
      });
      if (signal?.aborted) return;
      if (q?.tiers) {
        renderQuota(q);
        this.quota = q;
      }
      this.fill();
      $('#quota-status').textContent = `${tier} quota changed at ${clock(new Date())}.`;
    } catch (e) {
      if (signal?.aborted) return;
      if (e.status === 401) return expired(e);
      showIn('#quota-error', `Quota refused. ${describe(e)}`);
    } finally {
      $('#quota-save').disabled = false;
    }
  },
};

// --- remediation ---------------------------------------------------------------

// remediationView shows platform admins, per member cluster, what the
// remediation service sees and does (GET /v1/remediation, polled): whether
// it is paused and why, the storm breaker of each failure domain, the
// unhealthy nodes with their phase (what is being done), the signal and
// why nothing happens now, and each node's history; Pause and Resume (a
// cluster, or the whole region) ask first, then call the API with the
// reason typed in #remediation-reason.
function remediationView(signal) {
  show('remediation-view');
  document.title = 'Remediation · Atoll console';
  hide('#remediation-error');
  hide('#remediation-op-error');
  $('#remediation-clusters').replaceChildren();
  $('#remediation-empty').hidden = true;
  $('#remediation-status').textContent = 'loading…';
  poll(
    signal,
    async () => {
      const st = await getJSON('/remediation', { signal });
      if (signal.aborted) return;
      renderRemediation(st.items || [], signal);
      hide('#remediation-error');
      $('#remediation-status').textContent = `live · updated ${clock(new Date())}`;
    },
    (err) => {
      showIn('#remediation-error', err);
      const final = err.status === 403;
      $('#remediation-status').textContent = final ? '' : 'retrying…';
      return final;
    },
  );
}

function wireRemediation() {
  for (const [sel, action] of [['#remediation-pause-region', 'pause'], ['#remediation-resume-region', 'resume']]) {
    $(sel).addEventListener('click', () => current && remediationOp(action, '', current.signal));
  }
}

// remediationOp asks, then pauses or resumes a cluster ("" the region),
// and renders the status the API answers.
async function remediationOp(action, cluster, signal) {
  const pausing = action === 'pause';
  const scope = cluster ? `cluster ${cluster}` : 'the region';
  const reason = $('#remediation-reason').value.trim();
  const answer = await confirmDialog({
    title: `${pausing ? 'Pause' : 'Resume'} remediation in ${scope}?`,
    text: pausing
      ? `No new action (cordon, drain, replace) starts${reason ? ` (reason: ${reason})` : ''}; escalations already running go on.`
      : 'Unhealthy nodes are acted on again, within the breakers and rate limits.',
    ok: pausing ? 'Pause' : 'Resume',
    danger: pausing,
  });
  if (!answer || signal.aborted) return;
  hide('#remediation-op-error');
  const body = JSON.stringify(pausing ? { cluster, reason } : { cluster });
  try {
    await getJSON(`/remediation/${action}`, { method: 'POST', body, headers: { 'Content-Type': 'application/json' }, signal });
    if (signal.aborted) return;
    // The answer holds only the scope changed: read every cluster again.
    const st = await getJSON('/remediation', { signal });
    if (signal.aborted) return;
    renderRemediation(st.items || [], signal);
  } catch (e) {
    if (signal.aborted) return;
    if (e.status === 401) return expired(e);
    showIn('#remediation-op-error', `${pausing ? 'Pause' : 'Resume'} refused. ${describe(e)}`);
  }
}

// remediationWhy says what is being done to a node and why.
function remediationWhy(n) {
  if (n.waiting) return n.waiting;
  const blocked = n.drain?.blocked || [];
  if (blocked.length) {
    const pdbs = [...new Set(blocked.map((b) => b.pdb).filter(Boolean))];
    return `drain blocked on ${blocked.length} pod${blocked.length === 1 ? '' : 's'}${pdbs.length ? ` by ${pdbs.join(', ')}` : ''}`;
  }
  if (n.replace?.name) return `replacement ${n.replace.name} (attempt ${num(n.replace.attempt)})`;
  const h = n.history || [];
  if (h.length) return `${h[h.length - 1].event} ${h[h.length - 1].message || ''}`.trim();
  return '';
}

// renderRemediation draws one card per cluster. Cards are rebuilt on each
// poll, except the open history panels, which stay open.
function renderRemediation(clusters, signal) {
  const root = $('#remediation-clusters');
  const open = new Set([...root.querySelectorAll('details[open]')].map((d) => d.dataset.node));
  root.replaceChildren(
    ...clusters.map((c) => {
      const pause = el('button', { type: 'button', class: 'secondary danger', 'data-op': 'pause', 'data-cluster': c.cluster, text: 'Pause' });
      const resume = el('button', { type: 'button', class: 'secondary', 'data-op': 'resume', 'data-cluster': c.cluster, text: 'Resume' });
      pause.addEventListener('click', () => remediationOp('pause', c.cluster, signal));
      resume.addEventListener('click', () => remediationOp('resume', c.cluster, signal));
      const breakers = c.breakers || [];
      const nodes = c.nodes || [];
      return el(
        'article',
        { class: 'card remediation', 'data-cluster': c.cluster, 'data-paused': c.paused ? 'true' : 'false', 'data-reachable': c.reachable ? 'true' : 'false' },
        el(
          'div',
          { class: 'cluster-head' },
          el('h3', { text: c.cluster }),
          el('span', { class: `badge ${c.reachable ? '' : 'warn'}`, text: c.reachable ? 'reachable' : 'unreachable: no action' }),
          c.paused ? el('span', { class: 'badge warn paused', text: c.paused }) : null,
          c.holder ? el('span', { class: 'muted', text: `leader ${c.holder}` }) : null,
          el('span', { class: 'actions' }, pause, resume),
        ),
        el('h4', { text: 'Storm breakers' }),
        breakers.length
          ? el(
              'table',
              { class: 'grid compact breakers' },
              el('thead', {}, el('tr', {}, el('th', { text: 'Domain' }), el('th', { text: 'State' }), el('th', { class: 'num', text: 'Unhealthy / total' }), el('th', { class: 'num', text: 'Allowed' }))),
              el(
                'tbody',
                {},
                ...breakers.map((b) =>
                  el(
                    'tr',
                    { 'data-domain': b.domain, 'data-open': b.open ? 'true' : 'false' },
                    el('td', { text: b.domain }),
                    el('td', { class: b.open ? 'warn-text' : '', text: b.open ? (when(b.coolingUntil) ? `cooling until ${clock(b.coolingUntil)}` : `OPEN since ${clock(b.openedAt)}`) : 'closed' }),
                    el('td', { class: 'num', text: `${num(b.unhealthy)} / ${num(b.total)}` }),
                    el('td', { class: 'num', text: String(num(b.allowed)) }),
                  ),
                ),
              ),
            )
          : el('p', { class: 'muted', text: 'No breaker state reported yet.' }),
        el('h4', { text: 'Unhealthy nodes' }),
        nodes.length
          ? el(
              'table',
              { class: 'grid compact nodes' },
              el('thead', {}, el('tr', {}, ...['Node', 'Pool', 'Phase', 'Signal', 'Unhealthy since', 'What and why', 'History'].map((h) => el('th', { text: h })))),
              el(
                'tbody',
                {},
                ...nodes.map((n) => {
                  const hist = el(
                    'details',
                    { 'data-node': `${c.cluster}/${n.node}`, open: open.has(`${c.cluster}/${n.node}`) },
                    el('summary', { text: `${(n.history || []).length} events` }),
                    el('ol', { class: 'events' }, ...(n.history || []).map((e) => el('li', { 'data-event': e.event }, el('span', { class: 'muted', text: `${clock(e.time)} ` }), el('strong', { text: e.event }), e.message ? ` ${e.message}` : ''))),
                  );
                  return el(
                    'tr',
                    { 'data-node': n.node, 'data-phase': n.phase },
                    el('td', { text: n.node }),
                    el('td', { text: n.pool || '' }),
                    el('td', { 'data-phase': n.phase, text: n.phase + (n.flapping ? ' (flapping)' : '') }),
                    el('td', { text: n.signal || '' }),
                    el('td', { title: stamp(n.unhealthySince), text: ago(n.unhealthySince) }),
                    el('td', { class: 'why', text: remediationWhy(n) }),
                    el('td', {}, hist),
                  );
                }),
              ),
            )
          : el('p', { class: 'muted', text: 'Every node is healthy.' }),
      );
    }),
  );
  $('#remediation-empty').hidden = clusters.length > 0;
}

// --- upgrades ------------------------------------------------------------------

// upgradesView shows platform admins every node rotation plan (GET
// /v1/upgrades, polled, then GET /v1/upgrades/{name} for the nodes): its
// phase and the reason of any pause, per cluster and pool the wave and the
// nodes in each state, and the nodes in flight; Pause, Resume and Abort ask
// first, then call the API with the reason typed in #upgrades-reason.
function upgradesView(signal) {
  show('upgrades-view');
  document.title = 'Upgrades · Atoll console';
  hide('#upgrades-error');
  hide('#upgrades-op-error');
  $('#upgrades-plans').replaceChildren();
  $('#upgrades-empty').hidden = true;
  $('#upgrades-status').textContent = 'loading…';
  poll(
    signal,
    async () => {
      const list = await getJSON('/upgrades', { signal });
      const plans = await Promise.all((list.items || []).map((u) => getJSON(`/upgrades/${enc(u.name)}`, { signal })));
      if (signal.aborted) return;
      renderUpgrades(plans, signal);
      hide('#upgrades-error');
      $('#upgrades-status').textContent = `live · updated ${clock(new Date())}`;
    },
    (err) => {
      showIn('#upgrades-error', err);
      const final = err.status === 403;
      $('#upgrades-status').textContent = final ? '' : 'retrying…';
      return final;
    },
  );
}

// upgradeOp asks, then pauses, resumes or aborts a plan and renders the
// plan the API answers.
async function upgradeOp(action, name, signal) {
  const reason = $('#upgrades-reason').value.trim();
  const texts = {
    pause: `No new node of ${name} starts${reason ? ` (reason: ${reason})` : ''}; nodes already past their lease finish.`,
    resume: `${name} goes on, after a soak; any pause given before, the SLO gate's included, is lifted.`,
    abort: `${name} ends: the nodes in flight whose drain has not finished are rolled back per its policy.`,
  };
  const verb = action[0].toUpperCase() + action.slice(1);
  const answer = await confirmDialog({ title: `${verb} the rotation ${name}?`, text: texts[action], ok: verb, danger: action !== 'resume' });
  if (!answer || signal.aborted) return;
  hide('#upgrades-op-error');
  const body = JSON.stringify(action === 'resume' ? {} : { reason });
  try {
    const u = await getJSON(`/upgrades/${enc(name)}/${action}`, { method: 'POST', body, headers: { 'Content-Type': 'application/json' }, signal });
    if (signal.aborted) return;
    const root = $('#upgrades-plans');
    const old = root.querySelector(`.upgrade[data-plan="${CSS.escape(name)}"]`);
    if (old) old.replaceWith(upgradeCard(u, signal));
  } catch (e) {
    if (signal.aborted) return;
    if (e.status === 401) return expired(e);
    showIn('#upgrades-op-error', `${verb} refused. ${describe(e)}`);
  }
}

// upgradeCounts writes a pool's nodes per state ("done 3 · draining 1").
function upgradeCounts(nodes) {
  return Object.entries(nodes || {})
    .sort(([a], [b]) => a.localeCompare(b))
    .map(([s, n]) => `${s} ${n}`)
    .join(' · ');
}

const UPGRADE_OVER = new Set(['done', 'skipped', 'rolledback', 'gone', 'pending']);

function upgradeCard(u, signal) {
  const buttons = ['pause', 'resume', 'abort'].map((op) => {
    const b = el('button', { type: 'button', class: `secondary ${op === 'resume' ? '' : 'danger'}`, 'data-op': op, 'data-plan': u.name, text: op[0].toUpperCase() + op.slice(1) });
    b.addEventListener('click', () => upgradeOp(op, u.name, signal));
    return b;
  });
  const phase = u.phase || 'NotStarted';
  const why = u.reason ? `${u.pausedBy ? `${u.pausedBy}: ` : ''}${u.reason}` : '';
  const inFlight = (u.nodes || []).filter((n) => !UPGRADE_OVER.has(n.state));
  const target = u.spec?.target ? `${u.spec.target.label}=${u.spec.target.value}` : '';
  return el(
    'article',
    { class: 'card upgrade', 'data-plan': u.name, 'data-phase': phase },
    el(
      'div',
      { class: 'cluster-head' },
      el('h3', { text: u.name }),
      el('span', { class: 'muted', text: target }),
      el('span', { class: `badge phase ${phase === 'Paused' || phase === 'Aborted' ? 'warn' : ''}`, 'data-phase': phase, text: phase }),
      why ? el('span', { class: 'badge warn paused-reason', text: why }) : null,
      u.pauseRequested ? el('span', { class: 'badge warn', text: 'pause requested' }) : null,
      el('span', { class: 'muted', text: `${num(u.nodesDone)} rotated · ${num(u.nodesInFlight)} in flight` }),
      el('span', { class: 'actions' }, ...buttons),
    ),
    ...(u.clusters || []).map((c) =>
      el(
        'section',
        { class: 'upgrade-cluster', 'data-cluster': c.name, 'data-state': c.state },
        el('h4', { text: `${c.name} · ${c.state}` }),
        el(
          'table',
          { class: 'grid compact' },
          el('thead', {}, el('tr', {}, ...['Pool', 'State', 'Wave', 'Max unavailable', 'Max surge', 'Nodes'].map((h) => el('th', { text: h })))),
          el(
            'tbody',
            {},
            ...(c.pools || []).map((p) =>
              el(
                'tr',
                { class: 'upgrade-pool', 'data-pool': p.name, 'data-state': p.state, 'data-wave': String(num(p.wave)) },
                el('td', { text: p.name }),
                el('td', { text: p.state }),
                el('td', { class: 'num', text: p.state === 'current' ? String(num(p.wave)) : '' }),
                el('td', { text: p.maxUnavailable || '' }),
                el('td', { text: p.maxSurge || '' }),
                el('td', { class: 'counts', text: upgradeCounts(p.nodes) }),
              ),
            ),
          ),
        ),
      ),
    ),
    el('h4', { text: 'Nodes in flight' }),
    inFlight.length
      ? el(
          'table',
          { class: 'grid compact nodes' },
          el('thead', {}, el('tr', {}, ...['Node', 'Cluster', 'Pool', 'State', 'Since', 'Replacement', 'Why'].map((h) => el('th', { text: h })))),
          el(
            'tbody',
            {},
            ...inFlight.map((n) =>
              el(
                'tr',
                { class: 'upgrade-node', 'data-node': n.name, 'data-state': n.state },
                el('td', { text: n.name }),
                el('td', { text: n.cluster }),
                el('td', { text: n.pool }),
                el('td', { text: n.state + (n.surge ? ' (surge)' : '') }),
                el('td', { title: stamp(n.since), text: ago(n.since) }),
                el('td', { text: n.replacement || '' }),
                el('td', { class: 'why', text: n.blocked ? `drain blocked by ${n.blocked}` : n.why || '' }),
              ),
            ),
          ),
        )
      : el('p', { class: 'muted', text: 'No node in flight.' }),
  );
}

// renderUpgrades draws one card per plan, rebuilt on each poll.
function renderUpgrades(plans, signal) {
  $('#upgrades-plans').replaceChildren(...plans.map((u) => upgradeCard(u, signal)));
  $('#upgrades-empty').hidden = plans.length > 0;
}

// --- managed sidecars -----------------------------------------------------------

// sidecarsView shows platform admins the managed sidecars (GET
// /v1/admin/sidecars/status and /history, polled): the current version
// and its sidecars, the rollout's phase, its progress per zone (when the
// rollout reports zones) and per workload (those being moved with their
// health gate, those behind), the workloads per version, and the history.
// Pause, Resume and Abort ask first, then call the API with the reason
// typed in #sidecars-reason and render the status it answers.
function sidecarsView(signal) {
  show('sidecars-view');
  document.title = 'Managed sidecars · Atoll console';
  hide('#sidecars-error');
  hide('#sidecars-op-error');
  for (const t of ['list', 'zones', 'moving', 'versions', 'behind', 'history']) $(`#sidecars-${t} tbody`).replaceChildren();
  $('#sidecars-status').textContent = 'loading…';
  poll(
    signal,
    async () => {
      const [st, hist] = await Promise.all([getJSON('/admin/sidecars/status', { signal }), getJSON('/admin/sidecars/history', { signal })]);
      if (signal.aborted) return;
      renderSidecars(st, hist.items || []);
      hide('#sidecars-error');
      $('#sidecars-status').textContent = `live · updated ${clock(new Date())}`;
    },
    (err) => {
      showIn('#sidecars-error', err);
      const final = err.status === 403;
      $('#sidecars-status').textContent = final ? '' : 'retrying…';
      return final;
    },
  );
}

function wireSidecars() {
  for (const op of ['pause', 'resume', 'abort']) {
    $(`#sidecars-${op}`).addEventListener('click', () => current && sidecarsOp(op, current.signal));
  }
}

// sidecarsOp asks, then pauses, resumes or aborts the rollout and renders
// the status the API answers.
async function sidecarsOp(action, signal) {
  const reason = $('#sidecars-reason').value.trim();
  const v = $('#sidecars-current').dataset.version || '';
  const texts = {
    pause: `No further workload moves to version ${v}${reason ? ` (reason: ${reason})` : ''}; workloads being moved finish.`,
    resume: `The rollout of version ${v} goes on; any pause, the health gate's included, is lifted.`,
    abort: `No further workload moves to version ${v} until a newer version is set; those moved keep it.`,
  };
  const verb = action[0].toUpperCase() + action.slice(1);
  const answer = await confirmDialog({ title: `${verb} the rollout of the managed sidecars?`, text: texts[action], ok: verb, danger: action !== 'resume' });
  if (!answer || signal.aborted) return;
  hide('#sidecars-op-error');
  const body = JSON.stringify(action === 'resume' ? {} : { reason });
  try {
    const st = await getJSON(`/admin/sidecars/${action}`, { method: 'POST', body, headers: { 'Content-Type': 'application/json' }, signal });
    if (signal.aborted) return;
    renderSidecarStatus(st);
  } catch (e) {
    if (signal.aborted) return;
    if (e.status === 401) return expired(e);
    showIn('#sidecars-op-error', `${verb} refused. ${describe(e)}`);
  }
}

// workloadLink links a workload key (project.kind.name) to its page.
function workloadLink(key) {
  const [project, kind, ...rest] = String(key).split('.');
  if (!project || !kind || !rest.length) return document.createTextNode(String(key));
  const name = rest.join('.');
  return el('a', { href: `#/p/${enc(project)}/${enc(kind)}/${enc(name)}`, text: `${project}/${kind}/${name}` });
}

// fillFields writes values into root's dd[data-field] elements.
function fillFields(root, values) {
  for (const [field, text] of Object.entries(values)) {
    const dd = root.querySelector(`dd[data-field="${field}"]`);
    if (dd) dd.textContent = text === '' || text === undefined || text === null ? '—' : String(text);
  }
}

// resourcesText writes a container's requests ("cpu 10m · memory 16Mi").
function resourcesText(r) {
  return Object.entries(r?.requests || {})
    .map(([k, v]) => `${k} ${v}`)
    .join(' · ');
}

// renderSidecars draws the current version, the history and the status.
function renderSidecars(st, history) {
  const cur = history.find((v) => v.version === st.current) || null;
  $('#sidecars-empty').hidden = num(st.current) > 0;
  const card = $('#sidecars-current');
  card.dataset.version = String(num(st.current));
  const ro = cur?.rollout || {};
  fillFields(card, {
    version: cur ? String(cur.version) : 'none',
    created: cur ? `${stamp(cur.created)} (${ago(cur.created)})` : '',
    by: cur?.createdBy || '',
    rollout: cur ? `at most ${num(ro.maxUnavailable)} workloads at once · bake ${num(ro.bakeSeconds)}s · on failure ${ro.onFailure || 'Pause'}` : '',
  });
  $('#sidecars-list tbody').replaceChildren(
    ...(cur?.sidecars || []).map((c) =>
      el(
        'tr',
        { 'data-sidecar': c.name },
        el('td', { text: c.name }),
        el('td', { class: 'mono', text: c.image }),
        el('td', { text: resourcesText(c.resources) }),
        el('td', { text: (c.kinds || []).join(', ') || 'every kind' }),
        el('td', { text: (c.projects || []).join(', ') || 'every project' }),
      ),
    ),
  );
  $('#sidecars-history tbody').replaceChildren(
    ...history.map((v) =>
      el(
        'tr',
        { 'data-version': String(v.version) },
        el('td', { class: 'num', text: `${v.version}${v.version === st.current ? ' (current)' : ''}` }),
        el('td', { title: stamp(v.created), text: ago(v.created) }),
        el('td', { text: v.createdBy || '' }),
        el('td', { class: 'mono', text: (v.sidecars || []).map((c) => `${c.name}=${c.image}`).join(', ') }),
      ),
    ),
  );
  renderSidecarStatus(st);
}

// renderSidecarStatus draws the rollout, its zones (when it reports them)
// and workloads, and the workloads per version, from a status of the API.
function renderSidecarStatus(st) {
  const ro = st.rollout || {};
  const c = st.control || {};
  const card = $('#sidecars-rollout');
  card.dataset.phase = ro.phase || 'None';
  card.dataset.version = String(num(ro.version));
  const versions = st.versions || [];
  const onCurrent = versions.find((v) => v.version === st.current);
  const total = versions.reduce((n, v) => n + num(v.workloads), 0);
  fillFields(card, {
    phase: ro.phase ? `${ro.phase} (version ${num(ro.version)})` : 'no rollout yet',
    progress: `${num(onCurrent?.workloads)} of ${total} workloads on version ${num(st.current)} · ${num(ro.done)} moved and baked · ${(ro.moving || []).length} moving · ${num(ro.rolledBack)} rolled back`,
    message: ro.message || '',
    updated: ro.updated ? `${clock(ro.updated)} (${ago(ro.updated)})` : '',
  });
  const paused = $('#sidecars-paused');
  const why = [c.paused ? 'paused' : '', c.aborted ? `version ${c.aborted} aborted` : '', c.reason ? `reason: ${c.reason}` : ''].filter(Boolean).join(' · ');
  paused.dataset.paused = String(!!c.paused);
  paused.textContent = why;
  paused.hidden = !why;

  const zones = Array.isArray(ro.zones) ? ro.zones : [];
  $('#sidecars-zones').hidden = zones.length === 0;
  $('#sidecars-zones-none').hidden = zones.length > 0;
  $('#sidecars-zones tbody').replaceChildren(
    ...zones.map((z) =>
      el(
        'tr',
        { 'data-zone': z.name, 'data-phase': z.phase || '' },
        el('td', { text: z.name }),
        el('td', { 'data-field': 'phase', text: z.phase || '' }),
        el('td', { class: 'num', 'data-field': 'healthy', text: num(z.workloads) ? `${num(z.healthy)}/${num(z.workloads)}` : '—' }),
        el('td', { 'data-field': 'open', text: ['Moving', 'Baking', 'Done', 'Failed'].includes(z.phase) ? (z.through ? `through ${z.through}` : 'all') : '—' }),
        el('td', { 'data-field': 'started', title: stamp(z.started), text: clock(z.started) || '—' }),
        el('td', { 'data-field': 'ready', title: stamp(z.readySince), text: clock(z.readySince) || '—' }),
        el('td', { 'data-field': 'finished', title: stamp(z.finished), text: clock(z.finished) || '—' }),
      ),
    ),
  );

  const moving = ro.moving || [];
  $('#sidecars-moving').hidden = moving.length === 0;
  $('#sidecars-moving-none').hidden = moving.length > 0;
  $('#sidecars-moving tbody').replaceChildren(
    ...moving.map((m) =>
      el(
        'tr',
        { 'data-workload': m.key, 'data-ready': String(!!when(m.readySince)) },
        el('td', {}, workloadLink(m.key)),
        el('td', { class: 'num', text: String(num(m.from)) }),
        el('td', { class: 'num', text: String(num(m.generation)) }),
        el('td', { title: stamp(m.started), text: ago(m.started) }),
        el('td', { text: when(m.readySince) ? `ready since ${clock(m.readySince)}` : 'not ready yet' }),
      ),
    ),
  );

  $('#sidecars-versions tbody').replaceChildren(
    ...versions.map((v) =>
      el(
        'tr',
        { 'data-version': String(v.version) },
        el('td', { class: 'num', text: v.version ? String(v.version) : '0 (admission’s own)' }),
        el('td', { class: 'num', 'data-field': 'workloads', text: String(num(v.workloads)) }),
      ),
    ),
  );
  const behind = st.behind || [];
  $('#sidecars-behind').hidden = behind.length === 0;
  $('#sidecars-behind-none').hidden = behind.length > 0;
  $('#sidecars-behind tbody').replaceChildren(
    ...behind.map((b) =>
      el(
        'tr',
        { 'data-workload': `${b.project}/${b.kind}/${b.name}`, 'data-version': String(num(b.version)) },
        el('td', {}, el('a', { href: `#/p/${enc(b.project)}/${enc(b.kind)}/${enc(b.name)}`, text: `${b.project}/${b.kind}/${b.name}` })),
        el('td', { class: 'num', text: String(num(b.version)) }),
      ),
    ),
  );
}

// --- SLI charts ----------------------------------------------------------------

const SVG_NS = 'http://www.w3.org/2000/svg';

function svg(tag, attrs = {}, ...children) {
  const e = document.createElementNS(SVG_NS, tag);
  for (const [k, v] of Object.entries(attrs)) if (v !== undefined && v !== null) e.setAttribute(k, String(v));
  for (const c of children) if (c !== null && c !== undefined) e.append(c);
  return e;
}

// niceCeil rounds up to 1, 2 or 5 times a power of ten.
function niceCeil(v) {
  if (!(v > 0)) return 1;
  const p = 10 ** Math.floor(Math.log10(v));
  for (const m of [1, 2, 5, 10]) if (m * p >= v) return m * p;
  return 10 * p;
}

function seconds(v) {
  if (v >= 60) return `${(v / 60).toFixed(1)} min`;
  if (v >= 10) return `${Math.round(v)} s`;
  if (v >= 1) return `${v.toFixed(1)} s`;
  return `${Math.round(v * 1000)} ms`;
}

function percent(v) {
  if (v === 0) return '0%';
  if (v < 0.1) return `${v.toFixed(3)}%`;
  if (v < 10) return `${v.toFixed(1)}%`;
  return `${Math.round(v)}%`;
}

// drawChart draws a small line chart of per-minute series into box:
// times (ISO minute starts), series [{name, cls, values (null: no point)}],
// optional volume (drawn as faint bars scaled to their own maximum), fmt
// for the axis and the points' titles, floor the least top of the y axis,
// an optional threshold {value, label} drawn as a dashed line.
function drawChart(box, { times, series, volume, fmt, floor, empty, threshold }) {
  const W = 600;
  const H = 180;
  const L = 56;
  const R = 10;
  const T = 10;
  const B = 22;
  const n = times.length;
  const pw = W - L - R;
  const ph = H - T - B;
  const x = (i) => L + (n > 1 ? (i * pw) / (n - 1) : pw);
  const values = series.flatMap((s) => s.values.filter((v) => v !== null && Number.isFinite(v)));
  const top = niceCeil(Math.max(floor, ...values));
  const y = (v) => T + ph - (Math.min(v, top) / top) * ph;
  const root = svg('svg', { viewBox: `0 0 ${W} ${H}`, class: 'chart-svg', 'data-points': 0 });
  // Grid and y labels.
  for (const f of [0, 0.5, 1]) {
    const gy = y(top * f);
    root.append(svg('line', { class: 'grid', x1: L, x2: W - R, y1: gy, y2: gy }));
    root.append(svg('text', { class: 'axis', x: L - 6, y: gy + 4, 'text-anchor': 'end' }, fmt(top * f)));
  }
  // x labels: minutes before now.
  for (const back of [60, 45, 30, 15, 0]) {
    const i = n - 1 - back;
    if (i < 0 && back !== 60) continue;
    root.append(svg('text', { class: 'axis', x: x(Math.max(i, 0)), y: H - 6, 'text-anchor': back === 60 ? 'start' : back === 0 ? 'end' : 'middle' }, back ? `-${back}m` : 'now'));
  }
  if (volume) {
    const vmax = Math.max(1, ...volume);
    const bw = Math.max(1, pw / Math.max(n, 1) - 1);
    volume.forEach((v, i) => {
      if (!v) return;
      const h = (v / vmax) * ph * 0.35;
      root.append(svg('rect', { class: 'volume', x: x(i) - bw / 2, y: T + ph - h, width: bw, height: h }, svg('title', {}, `${clock(times[i])} · ${v} requests`)));
    });
  }
  if (threshold) {
    const ty = y(threshold.value);
    root.append(svg('line', { class: 'slo', x1: L, x2: W - R, y1: ty, y2: ty }));
    root.append(svg('text', { class: 'slo-label', x: W - R, y: ty - 4, 'text-anchor': 'end' }, threshold.label));
  }
  let points = 0;
  for (const s of series) {
    let d = '';
    let pen = false;
    s.values.forEach((v, i) => {
      if (v === null || !Number.isFinite(v)) {
        pen = false;
        return;
      }
      d += `${pen ? 'L' : 'M'}${x(i).toFixed(1)},${y(v).toFixed(1)}`;
      pen = true;
    });
    if (d) root.append(svg('path', { class: `line ${s.cls}`, d }));
    s.values.forEach((v, i) => {
      if (v === null || !Number.isFinite(v)) return;
      points++;
      const extra = s.title ? ` · ${s.title(i)}` : '';
      root.append(
        svg('circle', { class: `pt ${s.cls}`, cx: x(i).toFixed(1), cy: y(v).toFixed(1), r: 2.5, 'data-minute': times[i], 'data-value': v },
          svg('title', {}, `${clock(times[i])} · ${s.name} ${fmt(v)}${extra}`)),
      );
    });
  }
  root.setAttribute('data-points', points);
  if (!points) root.append(svg('text', { class: 'empty', x: L + pw / 2, y: T + ph / 2, 'text-anchor': 'middle' }, empty));
  box.replaceChildren(root);
}

// renderSLIs draws the last hour of GET /v1/slis: launch latency (P50 and
// P95 per minute) and the share of Compute API requests answered 5xx.
function renderSLIs(h) {
  const mins = Array.isArray(h?.minutes) ? h.minutes : [];
  const times = mins.map((m) => m.start);
  const launches = mins.map((m) => num(m.launches));
  drawChart($('#chart-launch'), {
    times,
    fmt: seconds,
    floor: 1,
    empty: 'No launches in the last hour',
    series: [
      { name: 'P95', cls: 'p95', values: mins.map((m) => (m.launches ? num(m.launchP95Seconds) : null)), title: (i) => `${launches[i]} launches` },
      { name: 'P50', cls: 'p50', values: mins.map((m) => (m.launches ? num(m.launchP50Seconds) : null)), title: (i) => `${launches[i]} launches` },
    ],
  });
  const requests = mins.map((m) => num(m.requests));
  drawChart($('#chart-errors'), {
    times,
    fmt: percent,
    floor: 1,
    empty: 'No requests in the last hour',
    volume: requests,
    // PinCompute's availability objective: 99.9%.
    threshold: { value: 0.1, label: 'SLO: 99.9% available' },
    series: [
      {
        name: '5xx',
        cls: 'err',
        values: mins.map((m) => (m.requests ? (num(m.errors) / m.requests) * 100 : null)),
        title: (i) => `${num(mins[i].errors)} of ${requests[i]} requests`,
      },
    ],
  });
  const total = launches.reduce((a, b) => a + b, 0);
  const worst = Math.max(0, ...mins.map((m) => (m.launches ? num(m.launchMaxSeconds) : 0)));
  const latest = [...mins].reverse().find((m) => m.launches);
  $('#launch-summary').replaceChildren(
    el('span', { class: 'key p50', text: 'P50' }), ' ', el('span', { class: 'key p95', text: 'P95' }), ' · ',
    total ? `${total} launch${total === 1 ? '' : 'es'} · latest minute P50 ${seconds(num(latest.launchP50Seconds))}, P95 ${seconds(num(latest.launchP95Seconds))} · slowest ${seconds(worst)}` : 'no launches',
  );
  const reqs = requests.reduce((a, b) => a + b, 0);
  const errs = mins.reduce((a, m) => a + num(m.errors), 0);
  $('#errors-summary').replaceChildren(
    el('span', { class: 'key err', text: '5xx rate' }), ' ', el('span', { class: 'key volume', text: 'requests' }), ' · ',
    reqs ? `${reqs} requests, ${errs} answered 5xx · availability ${(100 * (1 - errs / reqs)).toFixed(3)}% (this gateway replica)` : 'no requests',
  );
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

  $('#project-select').addEventListener('change', (e) => {
    const p = e.currentTarget.value;
    if (p && PROJECT_RE.test(p)) location.hash = `#/p/${enc(p)}`;
  });

  $('#project-create-form').addEventListener('submit', (e) => {
    e.preventDefault();
    createProject();
  });
  $('#member-add-form').addEventListener('submit', (e) => {
    e.preventDefault();
    addMember();
  });
  wireTokens();
  wireQuotaRequests();

  wireDialog();
  wireRemediation();
  wireSidecars();
  wireRollout();
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
