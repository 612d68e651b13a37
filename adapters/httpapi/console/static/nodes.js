// The nodes view (#/nodes): each node's health from the master's probes,
// when it was last seen healthy, and the READY template copies it holds.

import * as api from './api.js';
import { h, clear, bytes, when } from './dom.js';
import { view, nav, schedule, showError } from './common.js';

export function nodesView(gen) {
  const el = h('section', { id: 'nodes', class: 'card' });
  view.append(h('h1', {}, 'Nodes'), el);
  async function load() {
    let data;
    try {
      data = await api.listNodes();
    } catch (err) {
      if (gen === nav.generation) {
        showError(el, err);
      }
      return;
    }
    if (gen !== nav.generation) {
      return;
    }
    const nodes = data.data || [];
    clear(el);
    el.append(h('div', { class: 'table-wrap' }, h('table', { id: 'node-table' },
      h('thead', {}, h('tr', {}, ['Node', 'Address', 'Instance type', 'Health', 'Last seen', 'Templates held', 'Bytes used'].map((c) => h('th', { scope: 'col' }, c)))),
      h('tbody', {}, nodes.length === 0 ? h('tr', {}, h('td', { colspan: 7, class: 'empty' }, 'No nodes are configured.')) :
        nodes.map((n) => h('tr', { 'data-node-id': n.node_id },
          h('td', {}, n.node_id), h('td', {}, n.node_ip || ''), h('td', {}, n.instance_type || ''),
          h('td', {}, h('span', { class: 'status ' + (n.healthy ? 'status-ready' : 'status-failed') }, n.healthy ? 'HEALTHY' : 'DOWN'),
            n.last_error ? h('div', { class: 'error small' }, n.last_error) : null),
          h('td', {}, n.last_seen ? when(n.last_seen) : 'never'),
          h('td', {}, String(n.templates_held ?? 0)),
          h('td', {}, bytes(n.bytes_used || 0))))))));
    schedule(gen, load, 5000);
  }
  load();
}
