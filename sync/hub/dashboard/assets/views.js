// The dashboard's pages: each renders the JSON of its /ui/api/ answer.
import { h, table, pill, viewHref, deviceHref } from './dom.js';

const plural = (n, word) => n + ' ' + word + (n === 1 ? '' : 's');

const deviceLink = id => h('a', { href: deviceHref(id), class: 'device' }, id);

function labelList(labels) {
  const keys = Object.keys(labels || {}).sort();
  return h('span', { class: 'labels' }, keys.map(k => h('span', { class: 'label' }, k + '=' + labels[k])));
}

function searchBox(id, value, placeholder, onChange) {
  return h('input', { id, type: 'search', value: value || '', placeholder, oninput: e => onChange(e.target.value) });
}

function select(id, label, value, options, onChange) {
  return h('label', null, label + ' ',
    h('select', { id, onchange: e => onChange(e.target.value) },
      h('option', { value: '' }, 'all'),
      options.map(o => h('option', { value: o, selected: o === value }, o))));
}

// Devices: grouped by a chosen label, filtered by text.
export function devicesPage(data, params, go) {
  const q = (params.q || '').toLowerCase();
  const group = params.group || '';
  const shown = data.devices.filter(d => !q || d.id.toLowerCase().includes(q) || d.status.toLowerCase().includes(q) ||
    d.version.toLowerCase().includes(q) || Object.entries(d.labels).some(([k, v]) => (k + '=' + v).toLowerCase().includes(q)));
  const ready = data.devices.filter(d => d.ready).length;
  const groups = new Map();
  for (const d of shown) {
    const key = group ? (group in d.labels ? d.labels[group] : null) : '';
    if (!groups.has(key)) groups.set(key, []);
    groups.get(key).push(d);
  }
  const keys = [...groups.keys()].sort((a, b) => (a === null) - (b === null) || String(a).localeCompare(String(b)));
  const columns = [
    ['Device', d => deviceLink(d.id), 'name'],
    ['Status', d => pill(d.status), 'status'],
    ['Version', d => d.version || '—'],
    ['Pods', d => String(d.pods), 'num'],
    ['Last seen', d => d.seen],
    ['Generation', d => d.observedGeneration === d.generation ? String(d.generation) : d.observedGeneration + ' → ' + d.generation, 'num'],
    ['Update', d => d.update || ''],
    ['Labels', d => labelList(d.labels)],
  ];
  return h('section', { id: 'devices-page' },
    h('h1', null, 'Devices'),
    h('p', { class: 'summary' }, h('span', { id: 'devices-count' }, plural(data.devices.length, 'device')), ' · ',
      h('span', { class: 'ok-text' }, ready + ' ready'), ' · ',
      h('span', { class: data.devices.length - ready ? 'bad-text' : '' }, (data.devices.length - ready) + ' not ready')),
    h('div', { class: 'filters' },
      select('group-by', 'Group by', group, data.labelKeys, v => go({ ...params, group: v })),
      searchBox('device-filter', params.q, 'filter devices', v => go({ ...params, q: v }, true))),
    keys.length === 0 ? h('p', { class: 'muted' }, 'No devices match.') : null,
    keys.map(k => {
      const ds = groups.get(k);
      const title = group ? (k === null ? 'no ' + group + ' label' : group + '=' + k) : 'All devices';
      return h('div', { class: 'group', 'data-group': k === null ? '' : k },
        h('h2', null, title, h('span', { class: 'muted' }, ' — ' + plural(ds.length, 'device') + ', ' + ds.filter(d => d.ready).length + ' ready')),
        table(null, columns, ds, d => ({ 'data-device': d.id })));
    }));
}

// keyValues lists obj's fields in their order, or sorted.
function keyValues(id, obj, sorted) {
  const keys = Object.keys(obj || {});
  if (sorted) keys.sort();
  if (!keys.length) return h('p', { class: 'muted' }, 'none');
  return h('dl', { id, class: 'kv' }, keys.map(k => [h('dt', null, k), h('dd', null, String(obj[k]))]));
}

const podColumns = withDevice => [
  ['Namespace', p => p.namespace],
  ['Name', p => p.name, 'name'],
  ['Ready', p => p.ready, 'num'],
  ['Status', p => pill(p.status), 'status'],
  ['Restarts', p => p.restarts, 'restarts'],
  ['Age', p => p.age],
  ['IP', p => p.ip || '<none>'],
  withDevice ? ['Device', p => p.device ? deviceLink(p.device) : '<none>'] : null,
  ['Controlled by', p => p.owner || ''],
].filter(Boolean);

const podRowProps = p => ({ 'data-pod': p.namespace + '/' + p.name, 'data-device': p.device });

function bytes(n) {
  if (!n) return '—';
  const u = ['B', 'KiB', 'MiB', 'GiB', 'TiB'];
  let i = 0;
  while (n >= 1024 && i < u.length - 1) { n /= 1024; i++; }
  return n.toFixed(i ? 1 : 0) + ' ' + u[i];
}

function metrics(m) {
  if (!m) return h('p', { class: 'muted' }, 'The device sends no metrics snapshot.');
  const rows = {
    'running pods': m.runningPods, 'running containers': m.runningContainers,
    'container restarts': m.containerRestarts, evictions: m.evictions, preemptions: m.preemptions,
    'container start errors': m.startedContainersErrors, 'probe failures': m.probeFailures,
    'pods CPU seconds': (m.podsCPUSeconds || 0).toFixed(1), 'pods memory working set': bytes(m.podsMemoryWorkingSetBytes),
    'node memory working set': bytes(m.nodeMemoryWorkingSetBytes), 'node memory available': bytes(m.nodeMemoryAvailableBytes),
    'node fs available': bytes(m.nodeFsAvailableBytes), 'outbox items': m.outboxDepth,
    'outbox oldest': (m.outboxOldestSeconds || 0).toFixed(0) + ' s',
  };
  if (m.pressure) {
    rows['pressure cpu (avg10)'] = m.pressure.cpu.toFixed(1) + ' %';
    rows['pressure memory (avg10)'] = m.pressure.memory.toFixed(1) + ' %';
    rows['pressure io (avg10)'] = m.pressure.io.toFixed(1) + ' %';
  }
  return keyValues('metrics', rows);
}

// A device: its pods with kubectl's columns, conditions, metrics, events.
export function devicePage(v) {
  const d = v.device;
  const summary = {
    status: d.status, version: d.version || '—', 'last seen': d.seen + ' ago', pods: d.pods,
    generation: d.generation, 'observed generation': d.observedGeneration,
  };
  if (d.update) summary.update = d.update;
  if (v.ackError) summary['refused desired document'] = v.ackError;
  if (v.instances) summary['installations under this ID'] = v.instances.join(', ');
  if (v.taints) summary.taints = v.taints.join(', ');
  return h('section', { id: 'device-page', 'data-device': d.id },
    h('p', null, h('a', { href: '#/devices' }, '← Devices')),
    h('h1', null, d.id, ' ', pill(d.status)),
    h('div', { class: 'cols' },
      h('div', null, h('h2', null, 'Summary'), keyValues('device-summary', summary), h('h3', null, 'Labels'), labelList(d.labels)),
      h('div', null, h('h2', null, 'Metrics'), metrics(v.metrics))),
    h('h2', null, 'Pods'),
    v.pods.length ? table('device-pods', podColumns(false), v.pods, podRowProps) : h('p', { class: 'muted' }, 'No pods.'),
    h('h2', null, 'Conditions'),
    v.conditions.length ? table('conditions', [
      ['Type', c => c.type], ['Status', c => c.status], ['Since', c => c.since || ''], ['Reason', c => c.reason || ''],
      ['Message', c => c.message || '', 'message']], v.conditions) : h('p', { class: 'muted' }, 'No node status yet.'),
    v.updateState ? [h('h2', null, 'Update'), keyValues('update', {
      kind: v.updateState.kind, version: v.updateState.version, phase: v.updateState.phase,
      percent: v.updateState.percent + ' %', reason: v.updateState.reason || '', running: v.updateState.running || '',
      previous: v.updateState.previous || '' })] : null,
    h('div', { class: 'cols' },
      h('div', null, h('h2', null, 'Capacity'), keyValues('capacity', v.capacity, true)),
      h('div', null, h('h2', null, 'Allocatable'), keyValues('allocatable', v.allocatable, true)),
      h('div', null, h('h2', null, 'System'), keyValues('system', v.system, true))),
    h('h2', null, 'Events'),
    v.events.length ? table('events', [
      ['Last seen', e => e.age], ['Type', e => e.type], ['Reason', e => e.reason], ['Object', e => e.pod ? 'pod/' + e.pod : 'device/' + d.id],
      ['Message', e => e.message, 'message']], v.events, e => ({ class: e.type === 'Warning' ? 'warning' : null })) :
      h('p', { class: 'muted' }, 'No events.'));
}

// Pods across the fleet, filtered at the hub.
export function podsPage(v, params, go) {
  return h('section', { id: 'pods-page' },
    h('h1', null, 'Pods'),
    h('div', { class: 'filters' },
      select('filter-namespace', 'Namespace', params.namespace, v.namespaces, x => go({ ...params, namespace: x })),
      select('filter-phase', 'Phase', params.phase, v.phases, x => go({ ...params, phase: x })),
      select('filter-device', 'Device', params.device, v.devices, x => go({ ...params, device: x })),
      searchBox('filter-text', params.q, 'filter pods', x => go({ ...params, q: x }, true))),
    h('p', { class: 'summary', id: 'pods-count' }, v.truncated ? `${v.pods.length} shown of ${v.matched} matching (${v.total} pods)` :
      `${v.matched} of ${v.total} pods`),
    v.pods.length ? table('pods', podColumns(true), v.pods, podRowProps) : h('p', { class: 'muted' }, 'No pods match.'));
}

// Workloads and their rollouts' progress.
export function workloadsPage(v) {
  const bar = w => h('div', { class: 'progress' },
    h('progress', { max: Math.max(w.desired, 1), value: Math.min(w.updated, Math.max(w.desired, 1)), title: 'up to date' }),
    h('span', null, `${w.updated}/${w.desired} up to date`));
  const state = w => w.halted ? h('span', { class: 'pill bad', title: w.halted }, 'Halted') :
    w.paused ? h('span', { class: 'pill wait' }, 'Paused') :
      w.available >= w.desired && w.updated >= w.desired ? h('span', { class: 'pill ok' }, 'Complete') :
        h('span', { class: 'pill wait' }, 'Progressing');
  return h('section', { id: 'workloads-page' },
    h('h1', null, 'Workloads'),
    v.workloads.length ? table('workloads', [
      ['Kind', w => w.kind], ['Namespace', w => w.namespace], ['Name', w => h('a', {
        href: viewHref('pods', { namespace: w.namespace, q: w.name }) }, w.name), 'name'],
      ['Rollout', bar], ['State', state, 'status'],
      ['Desired', w => String(w.desired), 'num'], ['Up-to-date', w => String(w.updated), 'num'],
      ['Ready', w => String(w.ready), 'num'], ['Available', w => String(w.available), 'num'],
      ['Message', w => w.halted || w.progress || '', 'message'], ['Age', w => w.age]],
    v.workloads, w => ({ 'data-workload': w.kind + '/' + w.namespace + '/' + w.name })) :
      h('p', { class: 'muted' }, 'No workloads: apply a Deployment, DaemonSet or StatefulSet with podhub apply -f.'));
}
