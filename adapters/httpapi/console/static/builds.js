// The builds view (#/builds: jobs in progress and recent ones, updating
// live) and a build's page (#/b/<job id>: phase timeline, error, nodes
// and the lines the services logged about it).

import * as api from './api.js';
import { h, clear, hashLink, bytes, duration, when, statusBadge } from './dom.js';
import { view, nav, schedule, showError, dl } from './common.js';

// The phases in the order a build goes through them (the master's after
// the data plane's); a job shows the ones it passed.
export const phaseOrder = ['PULLING', 'UNPACKING', 'BUILDING_EXT4', 'GENERATING_JSON', 'UPLOADING', 'REGISTERING',
  'MIGRATING', 'DISTRIBUTING', 'CREATING_TEMPLATE', 'SNAPSHOTTING', 'READY'];
const unfinished = new Set(['PENDING', 'RUNNING', 'BUILT']);

export function pulled(j) {
  if (!j.pull_total_bytes) {
    return '';
  }
  return `${bytes(j.pull_downloaded_bytes || 0)} of ${bytes(j.pull_total_bytes)}, ${j.pull_completed_layers || 0}/${j.pull_total_layers || 0} layers`;
}

export function progressCell(j) {
  const pct = Math.max(0, Math.min(100, Number(j.progress) || 0));
  return h('span', { class: 'nowrap' }, h('progress', { max: 100, value: pct, 'aria-label': 'progress' }), ` ${pct}%`);
}

function nodesCell(j) {
  const parts = [];
  if (j.expected_node_count) {
    parts.push(`${j.ready_node_count || 0}/${j.expected_node_count} ready`);
    if (j.failed_node_count) {
      parts.push(`${j.failed_node_count} failed`);
    }
  }
  return h('span', {}, parts.join(', '),
    (j.nodes || []).map((n) => h('span', { class: 'node-chip', title: n.error || '' }, n.node_id + ' ', statusBadge(n.status))));
}

function jobRow(j) {
  return h('tr', { 'data-job-id': j.job_id },
    h('td', { class: 'mono' }, hashLink('/b/', j.job_id, j.job_id)),
    h('td', {}, hashLink('/t/', j.template_id, j.template_id)),
    h('td', {}, j.operation || ''),
    h('td', {}, statusBadge(j.status), j.error_message ? h('div', { class: 'error small' }, j.error_message) : null),
    h('td', {}, j.phase || ''),
    h('td', {}, progressCell(j)),
    h('td', {}, pulled(j)),
    h('td', {}, nodesCell(j)),
    h('td', {}, when(j.updated_at)));
}

function jobTable(id, jobs, empty) {
  return h('div', { class: 'table-wrap' }, h('table', { id },
    h('thead', {}, h('tr', {}, ['Job', 'Template', 'Operation', 'Status', 'Phase', 'Progress', 'Pulled', 'Nodes', 'Updated'].map((c) => h('th', { scope: 'col' }, c)))),
    h('tbody', {}, jobs.length ? jobs.map(jobRow) : h('tr', {}, h('td', { colspan: 9, class: 'empty' }, empty)))));
}

export function buildsView(gen) {
  const active = h('section', { id: 'builds-active', class: 'card' }, h('h2', {}, 'In progress'));
  const recent = h('section', { id: 'builds-recent', class: 'card' }, h('h2', {}, 'Recent'));
  view.append(h('h1', {}, 'Builds'), active, recent);
  async function load() {
    let a, r;
    try {
      [a, r] = await Promise.all([api.listJobs({ unfinished: '1', limit: '100' }), api.listJobs({ limit: '30' })]);
    } catch (err) {
      if (gen === nav.generation) {
        showError(active, err);
        if (!(err instanceof api.AuthError)) {
          schedule(gen, load);
        }
      }
      return;
    }
    if (gen !== nav.generation) {
      return;
    }
    clear(active);
    active.append(h('h2', {}, 'In progress'), jobTable('active-jobs', a.data || [], 'No build is under way.'));
    clear(recent);
    recent.append(h('h2', {}, 'Recent'), jobTable('recent-jobs', r.data || [], 'No builds yet.'));
    // Live: new builds show up and running ones move on their own.
    schedule(gen, load, (a.data || []).length ? 1500 : 3000);
  }
  load();
}

// timeline is the job's phases in order with how long each took; the
// phase under way is marked, and the one a failed job stopped in.
function timeline(j) {
  const d = j.phase_durations_ms || {};
  const seen = phaseOrder.filter((p) => p in d || p === j.phase);
  for (const p of Object.keys(d)) {
    if (!seen.includes(p)) {
      seen.push(p);
    }
  }
  const longest = Math.max(1, ...Object.values(d));
  const failed = j.status === 'FAILED';
  return h('ol', { id: 'timeline', class: 'timeline' }, seen.map((p) => {
    const current = p === j.phase && unfinished.has(j.status);
    const stopped = p === j.phase && failed;
    const state = stopped ? 'failed here' : current ? 'under way' : p in d ? duration(d[p]) : '';
    return h('li', { class: current ? 'current' : stopped ? 'stopped' : 'done', 'data-phase': p, 'aria-current': current ? 'step' : null },
      h('span', { class: 'phase-name' }, p),
      h('progress', { max: longest, value: d[p] || 0, 'aria-label': p + ' duration' }),
      h('span', { class: 'phase-time' }, state));
  }));
}

export function buildView(jobID, gen) {
  const head = h('section', { id: 'build-head', class: 'card' });
  const logEl = h('section', { id: 'build-log', class: 'card' });
  const level = h('select', { id: 'log-level', 'aria-label': 'Lowest level shown' },
    ['INFO', 'WARN', 'ERROR'].map((l) => h('option', { value: l }, l + ' and above')));
  let lines = [];
  const rank = { DEBUG: 0, INFO: 1, WARN: 2, ERROR: 3 };
  function renderLog() {
    clear(logEl);
    const min = rank[level.value] ?? 1;
    const shown = lines.filter((l) => (rank[l.level] ?? 1) >= min);
    logEl.append(h('h2', {}, 'Log'), h('div', { class: 'filters' }, level),
      shown.length === 0 ? h('p', { class: 'empty' }, 'No lines recorded for this job.') :
        h('div', { class: 'table-wrap' }, h('table', { id: 'log-lines' },
          h('thead', {}, h('tr', {}, ['Time', 'Level', 'Source', 'Message'].map((c) => h('th', { scope: 'col' }, c)))),
          h('tbody', {}, shown.map((l) => h('tr', { class: 'level-' + String(l.level).toLowerCase() },
            h('td', { class: 'nowrap' }, when(l.time)), h('td', {}, l.level), h('td', { class: 'small' }, l.source || ''),
            h('td', { class: 'mono' }, l.message)))))));
  }
  level.addEventListener('change', renderLog);
  view.append(h('p', {}, h('a', { href: '#/builds' }, '← Builds')), h('h1', { id: 'build-title' }, 'Build ', h('code', {}, jobID)), head, logEl);
  renderLog();

  async function load() {
    let job, log;
    try {
      [job, log] = await Promise.all([api.getJob(jobID), api.jobLog(jobID)]);
    } catch (err) {
      if (gen === nav.generation) {
        showError(head, err);
        if (!(err instanceof api.AuthError) && !(err instanceof api.APIError && err.code === api.codeNotFound)) {
          schedule(gen, load);
        }
      }
      return;
    }
    if (gen !== nav.generation) {
      return;
    }
    const j = job.job || {};
    renderHead(head, j);
    lines = log.lines || [];
    renderLog();
    if (unfinished.has(j.status)) {
      schedule(gen, load);
    }
  }
  load();
}

function renderHead(el, j) {
  clear(el);
  const art = j.artifact || {};
  el.append(
    dl([
      ['Template', hashLink('/t/', j.template_id, j.template_id)],
      ['Operation', [j.operation, j.redo_mode].filter(Boolean).join(' ')],
      ['Attempt', j.attempt_no],
      ['Status', h('span', { id: 'build-status' }, statusBadge(j.status))],
      ['Phase', h('span', { id: 'build-phase' }, j.phase || '')],
      ['Progress', progressCell(j)],
      ['Pulled', pulled(j)],
      ['Artifact', art.artifact_id ? h('span', { class: 'mono' }, art.artifact_id) : ''],
    ]));
  if (j.error_message) {
    const text = h('pre', { class: 'error-text', id: 'build-error-text' }, j.error_message);
    const out = h('span', { id: 'build-error-copied', class: 'small', role: 'status' });
    el.append(h('div', { id: 'build-error', class: 'banner error', role: 'alert' },
      h('strong', {}, `Failed in ${j.phase || 'an unknown phase'}`), ' ',
      h('button', { type: 'button', id: 'build-error-copy', class: 'copy', onclick: () => copyText(text, out) }, 'Copy error'), ' ', out,
      text));
  }
  el.append(h('h3', {}, 'Phases'), timeline(j));
  if ((j.nodes || []).length) {
    el.append(h('h3', {}, 'Nodes'), h('div', { class: 'table-wrap' }, h('table', { id: 'build-nodes' },
      h('thead', {}, h('tr', {}, ['Node', 'Step', 'Error'].map((c) => h('th', { scope: 'col' }, c)))),
      h('tbody', {}, j.nodes.map((n) => h('tr', {}, h('td', {}, n.node_id), h('td', {}, statusBadge(n.status)), h('td', { class: 'error' }, n.error || '')))))));
  }
}

// copyText puts the text of el on the clipboard; where the browser will
// not (no clipboard API, an insecure origin, permission refused) it
// selects the text instead, for the operator to copy by hand.
async function copyText(el, out) {
  try {
    if (!navigator.clipboard) {
      throw new Error('no clipboard');
    }
    await navigator.clipboard.writeText(el.textContent);
    out.textContent = 'Copied.';
  } catch {
    const range = document.createRange();
    range.selectNodeContents(el);
    const sel = window.getSelection();
    sel.removeAllRanges();
    sel.addRange(range);
    out.textContent = 'Selected: press Ctrl+C (⌘C) to copy.';
  }
}
