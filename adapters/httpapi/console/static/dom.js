// Element building. Server strings only ever become text nodes: h() sets
// textContent for strings and never parses HTML.

export function h(tag, attrs, ...children) {
  const el = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === undefined || v === null || v === false) {
      continue;
    }
    if (k.startsWith('on')) {
      el.addEventListener(k.slice(2), v);
    } else if (k === 'class') {
      el.className = v;
    } else if (k in el && typeof v !== 'string') {
      el[k] = v;
    } else {
      el.setAttribute(k, v === true ? '' : String(v));
    }
  }
  append(el, children);
  return el;
}

function append(el, children) {
  for (const c of children) {
    if (c === undefined || c === null || c === false) {
      continue;
    }
    if (Array.isArray(c)) {
      append(el, c);
    } else if (c instanceof Node) {
      el.appendChild(c);
    } else {
      el.appendChild(document.createTextNode(String(c)));
    }
  }
}

export function clear(el) {
  while (el.firstChild) {
    el.removeChild(el.firstChild);
  }
}

// hashLink is a link to a console route whose path segment is an id from
// the server, encoded so it cannot change the route.
export function hashLink(prefix, id, ...children) {
  return h('a', { href: '#' + prefix + encodeURIComponent(id) }, ...children);
}

export function bytes(n) {
  if (n === undefined || n === null || n === '') {
    return '';
  }
  const units = ['B', 'KiB', 'MiB', 'GiB', 'TiB'];
  let v = Number(n);
  let i = 0;
  while (v >= 1024 && i < units.length - 1) {
    v /= 1024;
    i++;
  }
  return (i === 0 ? String(v) : v.toFixed(1)) + ' ' + units[i];
}

export function duration(ms) {
  if (ms === undefined || ms === null) {
    return '';
  }
  if (ms < 1000) {
    return ms + ' ms';
  }
  const s = ms / 1000;
  return s < 60 ? s.toFixed(1) + ' s' : Math.floor(s / 60) + ' min ' + Math.round(s % 60) + ' s';
}

export function when(rfc3339) {
  if (!rfc3339) {
    return '';
  }
  const d = new Date(rfc3339);
  return isNaN(d) ? String(rfc3339) : d.toISOString().replace('T', ' ').replace(/\.\d+Z$/, ' UTC');
}

export function statusBadge(status) {
  const s = String(status || 'UNKNOWN');
  return h('span', { class: 'status status-' + s.toLowerCase().replace(/[^a-z_]/g, '') }, s);
}
