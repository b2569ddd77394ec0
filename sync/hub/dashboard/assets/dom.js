// DOM helpers. Every string goes into the document as text: a device
// reports names, labels, reasons and messages, and none of it may ever
// be parsed as markup.

// h makes an element: props sets attributes (class, href, …, data-*)
// and on* listeners; children are nodes or strings (as text), arrays of
// them, or null (skipped).
export function h(tag, props, ...children) {
  const el = document.createElement(tag);
  for (const [k, v] of Object.entries(props || {})) {
    if (v === null || v === undefined || v === false) continue;
    if (k.startsWith('on') && typeof v === 'function') {
      el.addEventListener(k.slice(2), v);
    } else if (k === 'value') {
      el.value = v;
    } else if (k === 'selected' || k === 'checked') {
      el[k] = !!v;
    } else {
      el.setAttribute(k, String(v));
    }
  }
  append(el, children);
  return el;
}

function append(el, children) {
  for (const c of children) {
    if (c === null || c === undefined || c === false) continue;
    if (Array.isArray(c)) append(el, c);
    else if (c instanceof Node) el.appendChild(c);
    else el.appendChild(document.createTextNode(String(c)));
  }
}

// replace puts children in place of el's.
export function replace(el, ...children) {
  el.replaceChildren();
  append(el, children);
}

// table makes a table of rows: columns are [heading, cell(row) → node or
// text, class]; rowProps(row) gives each row's attributes.
export function table(id, columns, rows, rowProps) {
  return h('table', { id, class: 'grid' },
    h('thead', null, h('tr', null, columns.map(([title, , cls]) => h('th', { class: cls }, title)))),
    h('tbody', null, rows.map(r => h('tr', rowProps ? rowProps(r) : null,
      columns.map(([, cell, cls]) => h('td', { class: cls }, cell(r)))))));
}

// statusClass is the colour of a status word: good, waiting or bad.
export function statusClass(s) {
  const w = String(s || '');
  if (/^(Running|Ready|Succeeded|Completed|True)$/.test(w) || w.startsWith('Ready,')) return 'pill ok';
  if (/^(Pending|ContainerCreating|PodInitializing|Init:\d|Terminating)/.test(w)) return 'pill wait';
  return 'pill bad';
}

export function pill(text) {
  return h('span', { class: statusClass(text) }, text);
}

// hashLink is a link to a view with its parameters.
export function viewHref(view, params) {
  const q = new URLSearchParams();
  for (const [k, v] of Object.entries(params || {})) if (v) q.set(k, v);
  const s = q.toString();
  return '#/' + view + (s ? '?' + s : '');
}

export function deviceHref(id) {
  return '#/device/' + encodeURIComponent(id);
}
