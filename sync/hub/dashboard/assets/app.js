// podhub's dashboard: the router, the fetches and the live updates.
// Pages are views of one document (#/devices, #/device/ID, #/pods,
// #/workloads); the hub pushes what changed (server-sent events) and the
// page fetches again only what the view shows. It polls nothing.
import { h, replace, viewHref } from './dom.js';
import { devicesPage, devicePage, podsPage, workloadsPage } from './views.js';

const main = document.getElementById('main');
const liveBadge = document.getElementById('live');

// route is the view the address names, with its parameters.
function route() {
  const raw = location.hash.replace(/^#\/?/, '');
  const [path, query] = raw.split('?', 2);
  const params = Object.fromEntries(new URLSearchParams(query || ''));
  const parts = path.split('/');
  if (parts[0] === 'device' && parts[1]) return { view: 'device', id: decodeURIComponent(parts.slice(1).join('/')), params };
  if (['devices', 'pods', 'workloads'].includes(parts[0])) return { view: parts[0], params };
  return { view: 'devices', params };
}

// api fetches one answer of /ui/api/; a lost login goes to the login page.
async function api(path) {
  const r = await fetch('api/' + path, { headers: { Accept: 'application/json' }, credentials: 'same-origin', cache: 'no-store' });
  if (r.status === 401 || (r.redirected && new URL(r.url).pathname.endsWith('/login'))) {
    location.assign('login');
    throw new Error('not logged in');
  }
  const body = await r.json().catch(() => ({ error: `answer ${r.status} is not JSON` }));
  if (!r.ok) throw new Error(body.error || `HTTP ${r.status}`);
  return body;
}

function apiPath(rt) {
  switch (rt.view) {
    case 'device': return 'devices/' + encodeURIComponent(rt.id);
    case 'pods': {
      const q = new URLSearchParams();
      for (const k of ['namespace', 'phase', 'device', 'q']) if (rt.params[k]) q.set(k, rt.params[k]);
      const s = q.toString();
      return 'pods' + (s ? '?' + s : '');
    }
    default: return rt.view;
  }
}

let current = route();
let data = null;
let loading = false;
let again = false;
let renders = 0;
let typing = 0;

// go changes the current view's parameters; quiet (typing) replaces the
// history entry instead of adding one, and fetches once the typing
// pauses.
function go(params, quiet) {
  const href = viewHref(current.view, params);
  if (quiet) {
    history.replaceState(null, '', href);
    current = route();
    clearTimeout(typing);
    if (current.view === 'devices') render(); else typing = setTimeout(load, 200);
  } else {
    location.hash = href;
  }
}

function render() {
  const focused = document.activeElement && document.activeElement.id;
  const caret = focused && document.activeElement.selectionStart;
  let page;
  switch (current.view) {
    case 'devices': page = devicesPage(data, current.params, go); break;
    case 'device': page = devicePage(data); break;
    case 'pods': page = podsPage(data, current.params, go); break;
    case 'workloads': page = workloadsPage(data); break;
  }
  replace(main, page);
  // Typing in a filter survives the re-render a live update makes.
  if (focused) {
    const el = document.getElementById(focused);
    if (el) {
      el.focus();
      if (typeof caret === 'number' && el.setSelectionRange) el.setSelectionRange(caret, caret);
    }
  }
  for (const v of ['devices', 'pods', 'workloads']) {
    document.getElementById('nav-' + v).classList.toggle('active', current.view === v || (v === 'devices' && current.view === 'device'));
  }
  renders++;
  document.body.dataset.view = current.view;
  document.body.dataset.renders = String(renders);
  document.title = (current.view === 'device' ? current.id : current.view[0].toUpperCase() + current.view.slice(1)) + ' · podhub';
}

// load fetches the current view's data and renders it; a load asked for
// while one is under way runs once more after it, and after a pause as
// long as that load took: a big fleet's busy page spends at most half
// its time loading.
async function load() {
  if (loading) { again = true; return; }
  loading = true;
  const rt = current;
  const started = performance.now();
  try {
    const body = await api(apiPath(rt));
    if (rt === current) { data = body; render(); }
  } catch (e) {
    if (rt === current) replace(main, h('p', { class: 'error', id: 'error' }, 'Could not load this page: ' + e.message));
  } finally {
    const took = performance.now() - started;
    if (again) {
      again = false;
      setTimeout(() => { loading = false; load(); }, took);
    } else {
      loading = false;
    }
  }
}

// affects: whether a change concerns the view shown.
function affects(c) {
  if (c.all) return true;
  switch (current.view) {
    case 'devices': return (c.devices || []).length > 0;
    case 'device': return (c.devices || []).includes(current.id);
    case 'pods': return c.pods || c.workloads || (c.devices || []).length > 0;
    case 'workloads': return c.workloads;
  }
  return false;
}

// live opens the event stream; after one that was open before (again),
// its first open fetches too.
function live(again) {
  const es = new EventSource('api/events');
  let opened = !!again;
  es.addEventListener('open', () => {
    liveBadge.textContent = 'live';
    liveBadge.className = 'live on';
    // Back after a break: whatever changed meanwhile was not told.
    if (opened) load();
    opened = true;
  });
  es.addEventListener('error', () => {
    liveBadge.textContent = 'reconnecting';
    liveBadge.className = 'live off';
    // The browser reconnects by itself after a broken stream, but gives up
    // on an answer that is no stream (a lapsed login's 401, a 503 or 429
    // of too many streams): a fetch then tells a lapsed login (to the
    // login page), and a new stream is tried in a few seconds.
    if (es.readyState === EventSource.CLOSED) {
      load();
      setTimeout(() => live(true), 5000);
    }
  });
  es.addEventListener('change', ev => {
    let c;
    try { c = JSON.parse(ev.data); } catch { return; }
    if (affects(c)) load();
  });
}

window.addEventListener('hashchange', () => {
  current = route();
  data = null;
  replace(main, h('p', { class: 'muted' }, 'Loading…'));
  load();
});

load();
live();
