// The console's views: #/ lists templates (with create from image),
// #/t/<id> shows one template (its latest job, polling while a build is
// under way, its job history, the placement controller's recent decisions
// about it, the merged sandbox request and the actions on it), #/builds and #/b/<job id> the builds (builds.js), #/nodes the
// nodes (nodes.js). Everything comes from the public API (api.js) and is
// rendered as text (dom.js).

import * as api from './api.js';
import { h, clear, hashLink, bytes, duration, when, statusBadge } from './dom.js';
import { view, nav, schedule, showError, askToken, dl, redacted, actionResult } from './common.js';
import { buildsView, buildView } from './builds.js';
import { nodesView } from './nodes.js';

const pageSize = 50;
const statuses = ['', 'READY', 'PARTIALLY_READY', 'PENDING', 'RUNNING', 'FAILED'];
const activeJob = new Set(['PENDING', 'RUNNING', 'BUILT']);
const settled = new Set(['READY', 'PARTIALLY_READY', 'FAILED']); // template statuses no build changes

const listState = { status: '', q: '', offset: 0 };

function decoded(s) {
  try {
    return decodeURIComponent(s);
  } catch {
    return s;
  }
}

function route() {
  const gen = ++nav.generation;
  clear(view);
  const hash = location.hash || '#/';
  for (const a of document.querySelectorAll('header nav a')) {
    const here = hash === a.getAttribute('href') || (a.getAttribute('href') === '#/builds' && hash.startsWith('#/b/')) ||
      (a.getAttribute('href') === '#/' && hash.startsWith('#/t/'));
    a.setAttribute('aria-current', here ? 'page' : 'false');
  }
  if (hash.startsWith('#/t/')) {
    templateView(decoded(hash.slice(4)), gen);
  } else if (hash.startsWith('#/b/')) {
    buildView(decoded(hash.slice(4)), gen);
  } else if (hash === '#/builds') {
    buildsView(gen);
  } else if (hash === '#/nodes') {
    nodesView(gen);
  } else {
    listView(gen);
  }
}

// ---- Templates ----

function listView(gen) {
  const msg = h('div', { id: 'list-message' });
  const body = h('tbody', { id: 'template-rows' });
  const pager = h('div', { class: 'pager', id: 'pager' });
  const status = h('select', { id: 'filter-status', 'aria-label': 'Status' },
    statuses.map((s) => h('option', { value: s, selected: s === listState.status }, s || 'any status')));
  const q = h('input', { id: 'filter-text', type: 'search', placeholder: 'id, alias or image', value: listState.q, 'aria-label': 'Filter' });
  const refilter = () => {
    listState.status = status.value;
    listState.q = q.value.trim();
    listState.offset = 0;
    load();
  };
  status.addEventListener('change', refilter);
  q.addEventListener('input', refilter);

  view.append(
    h('h1', {}, 'Templates'),
    createForm(),
    h('div', { class: 'filters' }, status, q),
    msg,
    h('div', { class: 'table-wrap' },
      h('table', { id: 'templates' },
        h('thead', {}, h('tr', {}, ['Template', 'Alias', 'Status', 'Image', 'Size', 'Builder', 'Replicas ready', 'Created', 'Updated', 'Last job'].map((c) => h('th', { scope: 'col' }, c)))),
        body)),
    pager);

  let seq = 0;
  async function load() {
    const mine = ++seq;
    const params = { limit: String(pageSize), offset: String(listState.offset) };
    if (listState.status) {
      params.status = listState.status;
    }
    if (listState.q) {
      params.q = listState.q;
    }
    let data;
    try {
      data = await api.listTemplates(params);
    } catch (err) {
      if (gen === nav.generation && mine === seq) {
        showError(msg, err);
        if (!(err instanceof api.AuthError)) {
          schedule(gen, load); // a passing failure: try again
        }
      }
      return;
    }
    if (gen !== nav.generation || mine !== seq) {
      return;
    }
    clear(msg);
    renderRows(body, data.data || []);
    renderPager(pager, data.total ?? (data.data || []).length, load);
    // A template still building updates in place.
    if ((data.data || []).some((t) => !settled.has(t.status))) {
      schedule(gen, load);
    }
  }
  load();
}

function renderRows(body, items) {
  clear(body);
  if (items.length === 0) {
    body.appendChild(h('tr', {}, h('td', { colspan: 10, class: 'empty' }, 'No templates match.')));
    return;
  }
  for (const t of items) {
    body.appendChild(h('tr', { 'data-template-id': t.template_id },
      h('td', {}, hashLink('/t/', t.template_id, t.template_id)),
      h('td', {}, t.alias || ''),
      h('td', {}, statusBadge(t.status), t.last_error ? h('div', { class: 'error small' }, t.last_error) : null),
      h('td', { class: 'mono' }, t.image_info || ''),
      h('td', { class: 'nowrap' }, t.size_bytes ? bytes(t.size_bytes) : ''),
      // The builder that wrote the artifact; "—" when not known (not
      // built yet, or built before the builder was recorded).
      h('td', { class: 'mono nowrap builder' }, t.builder || '—'),
      h('td', {}, `${t.replicas_ready ?? 0} / ${t.replicas_total ?? 0}`),
      h('td', {}, when(t.created_at)),
      h('td', {}, when(t.updated_at)),
      h('td', { class: 'mono' }, t.job_id ? hashLink('/b/', t.job_id, t.job_id) : '')));
  }
}

function renderPager(el, total, load) {
  clear(el);
  const from = total === 0 ? 0 : listState.offset + 1;
  const to = Math.min(listState.offset + pageSize, total);
  el.append(
    h('button', { type: 'button', disabled: listState.offset === 0, onclick: () => { listState.offset = Math.max(0, listState.offset - pageSize); load(); } }, 'Previous'),
    h('span', {}, ` ${from}–${to} of ${total} `),
    h('button', { type: 'button', disabled: to >= total, onclick: () => { listState.offset += pageSize; load(); } }, 'Next'));
}

function createForm() {
  const image = h('input', { id: 'create-image', required: true, placeholder: 'registry/repo:tag', size: 40 });
  const alias = h('input', { id: 'create-alias', placeholder: 'optional: a-z 0-9 -' });
  const size = h('input', { id: 'create-size', value: '1Gi', size: 6 });
  const user = h('input', { id: 'create-registry-user', autocomplete: 'off', placeholder: 'optional' });
  const pass = h('input', { id: 'create-registry-password', type: 'password', autocomplete: 'new-password', placeholder: 'optional' });
  const nodes = h('input', { id: 'create-nodes', placeholder: 'all healthy nodes', 'aria-describedby': 'create-nodes-help' });
  const out = h('p', { id: 'create-result', role: 'status' });
  const form = h('form', { id: 'create-form', class: 'card' },
    h('h2', {}, 'Create from image'),
    h('label', {}, 'Image ', image),
    h('label', {}, 'Alias ', alias),
    h('label', {}, 'Writable layer ', size),
    h('details', {}, h('summary', {}, 'Registry credentials and nodes'),
      h('label', {}, 'Registry user ', user),
      h('label', {}, 'Registry password ', pass),
      h('label', {}, 'Nodes ', nodes),
      h('p', { id: 'create-nodes-help', class: 'small muted' },
        'Node ids separated by commas or spaces; empty distributes to every healthy node. The credentials are sent once, kept sealed by the master for redo, and never shown again.')),
    h('button', { type: 'submit', id: 'create-submit' }, 'Create'),
    out);
  form.addEventListener('submit', async (e) => {
    e.preventDefault();
    const req = { source_image_ref: image.value.trim(), writable_layer_size: size.value.trim() };
    if (alias.value.trim()) {
      req.alias = alias.value.trim();
    }
    if (user.value.trim() || pass.value) {
      req.registry_username = user.value.trim();
      req.registry_password = pass.value;
    }
    const scope = nodeList(nodes.value);
    if (scope.length) {
      req.distribution_scope = scope;
    }
    out.className = '';
    out.textContent = 'Submitting…';
    try {
      const data = await api.createFromImage(req);
      pass.value = ''; // not kept in the page
      const job = data.job || {};
      location.hash = '#/t/' + encodeURIComponent(job.template_id);
    } catch (err) {
      out.className = 'error';
      out.textContent = 'Not created: ' + err.message;
      if (err instanceof api.AuthError) {
        askToken(err.message);
      }
    }
  });
  return form;
}

function nodeList(s) {
  return s.split(/[\s,]+/).map((x) => x.trim()).filter(Boolean);
}

// ---- Template ----

function templateView(id, gen) {
  const head = h('div', { id: 'template-head' });
  const jobEl = h('section', { id: 'job', class: 'card' });
  const replicasEl = h('section', { id: 'replicas', class: 'card' });
  const requestEl = h('section', { id: 'request', class: 'card' });
  const historyEl = h('section', { id: 'history', class: 'card' }, h('h2', {}, 'Job history'));
  const placementEl = h('section', { id: 'placement', class: 'card' }, h('h2', {}, 'Placement decisions'));
  const previewEl = h('section', { id: 'preview', class: 'card' }, h('h2', {}, 'Sandbox request preview'));
  const reload = () => {
    loadTemplate().then(() => loadJob(''));
    loadHistory();
    loadPlacement();
  };
  view.append(h('p', {}, h('a', { href: '#/' }, '← Templates')), h('h1', { id: 'template-title' }, 'Template ', h('code', {}, id)),
    head, actions(id, reload), jobEl, historyEl, replicasEl, placementEl, previewEl, requestEl, deleteForm(id));

  async function loadPlacement() {
    try {
      const data = await api.placementDecisions(id);
      if (gen === nav.generation) {
        renderPlacement(placementEl, (data.data || {}).decisions || []);
      }
    } catch (err) {
      if (gen === nav.generation) {
        clear(placementEl);
        placementEl.append(h('h2', {}, 'Placement decisions'), h('p', { class: 'muted', id: 'placement-empty' }, 'No placement record: ' + err.message));
      }
    }
  }

  async function loadHistory() {
    try {
      const data = await api.listJobs({ template_id: id, limit: '50' });
      if (gen === nav.generation) {
        renderHistory(historyEl, data.data || []);
      }
    } catch (err) {
      if (gen === nav.generation) {
        showError(historyEl, err);
      }
    }
  }

  async function loadPreview() {
    try {
      const data = await api.preview(id);
      if (gen === nav.generation) {
        clear(previewEl);
        previewEl.append(h('h2', {}, 'Sandbox request preview'),
          h('p', { class: 'small muted' }, 'A sandbox create naming this template, merged with it as the master would (POST /cube/sandbox/preview); download tokens hidden.'),
          h('pre', { id: 'preview-merged' }, redacted(data.merged_request || {})));
      }
    } catch (err) {
      if (gen === nav.generation) {
        clear(previewEl);
        previewEl.append(h('h2', {}, 'Sandbox request preview'), h('p', { class: 'muted', id: 'preview-merged' }, 'No preview: ' + err.message));
      }
    }
  }

  async function loadTemplate() {
    let t;
    try {
      t = await api.getTemplate(id);
    } catch (err) {
      if (gen === nav.generation) {
        showError(head, err);
      }
      return null;
    }
    if (gen !== nav.generation) {
      return null;
    }
    renderTemplate(head, replicasEl, requestEl, t);
    shownStatus = t.status;
    return t;
  }

  let shownStatus = '';
  async function loadJob(jobID) {
    let data;
    try {
      data = jobID ? await api.getJob(jobID) : await api.templateJob(id);
    } catch (err) {
      if (gen !== nav.generation) {
        return;
      }
      if (err instanceof api.APIError && err.code === api.codeNotFound) {
        clear(jobEl);
        jobEl.append(h('h2', {}, 'Latest job'), h('p', {}, 'This template has no job.'));
        return;
      }
      showError(jobEl, err);
      if (!(err instanceof api.AuthError)) {
        schedule(gen, () => loadJob(jobID));
      }
      return;
    }
    if (gen !== nav.generation) {
      return;
    }
    const job = data.job || {};
    renderJob(jobEl, job);
    if (activeJob.has(job.status)) {
      // The job is live: poll it, and the template's replicas with it.
      schedule(gen, async () => {
        await loadTemplate();
        loadJob(job.job_id);
      });
    } else if (jobID || !settled.has(shownStatus)) {
      // The last poll saw it end, or it ended between the template's
      // read and the job's (the template shown is older than the job):
      // show the final state.
      loadTemplate();
      loadHistory();
      loadPlacement();
      loadPreview();
    }
  }

  loadTemplate().then(() => loadJob(''));
  loadHistory();
  loadPlacement();
  loadPreview();
}

// renderPlacement shows the placement controller's recent decisions about
// the template (GET /cube/template/{id}/placement), newest first.
function renderPlacement(el, decisions) {
  clear(el);
  el.append(h('h2', {}, 'Placement decisions'));
  if (decisions.length === 0) {
    el.append(h('p', { class: 'empty muted', id: 'placement-empty' }, 'The placement controller has recorded no decision about this template.'));
    return;
  }
  el.append(h('div', { class: 'table-wrap' }, h('table', { id: 'placement-table' },
    h('thead', {}, h('tr', {}, ['Time', 'Decision', 'Reason', 'Node', 'Job', 'Master', 'Detail'].map((c) => h('th', { scope: 'col' }, c)))),
    h('tbody', {}, decisions.map((d) => h('tr', { class: 'decision-' + String(d.decision || '').toLowerCase().replace(/[^a-z_]/g, '') },
      h('td', { class: 'nowrap' }, when(d.at)),
      h('td', {}, d.decision || ''),
      h('td', {}, d.reason || ''),
      h('td', {}, d.node_id || ''),
      h('td', { class: 'mono' }, d.job_id ? hashLink('/b/', d.job_id, d.job_id) : ''),
      h('td', { class: 'small' }, d.master || ''),
      h('td', { class: d.decision === 'failed' ? 'error small' : 'small' }, d.message || '')))))));
}

function renderHistory(el, jobs) {
  clear(el);
  el.append(h('h2', {}, 'Job history'));
  if (jobs.length === 0) {
    el.append(h('p', {}, 'No jobs.'));
    return;
  }
  el.append(h('div', { class: 'table-wrap' }, h('table', { id: 'history-table' },
    h('thead', {}, h('tr', {}, ['#', 'Job', 'Operation', 'Status', 'Phase durations', 'Total', 'Updated'].map((c) => h('th', { scope: 'col' }, c)))),
    h('tbody', {}, jobs.map((j) => {
      const d = j.phase_durations_ms || {};
      const total = Object.values(d).reduce((a, b) => a + b, 0);
      return h('tr', { 'data-job-id': j.job_id },
        h('td', {}, String(j.attempt_no || '')),
        h('td', { class: 'mono' }, hashLink('/b/', j.job_id, j.job_id)),
        h('td', {}, [j.operation, j.redo_mode].filter(Boolean).join(' ')),
        h('td', {}, statusBadge(j.status), j.error_message ? h('div', { class: 'error small' }, j.error_message) : null),
        h('td', { class: 'small' }, Object.entries(d).map(([p, ms]) => `${p} ${duration(ms)}`).join(', ')),
        h('td', { class: 'nowrap' }, total ? duration(total) : ''),
        h('td', {}, when(j.updated_at)));
    })))));
}

// actions are what an operator does to a template, each through the
// public API: redo, set/move/clear its alias, merge.
function actions(id, reload) {
  const out = h('p', { id: 'action-result', role: 'status' });
  const run = async (what, fn) => {
    out.className = '';
    out.textContent = what + '…';
    try {
      await fn();
      actionResult(out, true, what + ': done.');
      reload();
    } catch (err) {
      actionResult(out, false, what + ' refused: ' + err.message);
      if (err instanceof api.AuthError) {
        askToken(err.message);
      }
    }
  };

  const redoNodes = h('input', { id: 'redo-nodes', placeholder: 'node ids (empty: all)', 'aria-label': 'Nodes to redo' });
  const redoForm = h('form', { id: 'redo-form' },
    h('strong', {}, 'Redo '), redoNodes, ' ',
    h('button', { type: 'submit', id: 'redo-submit' }, 'Redo'), ' ',
    h('button', { type: 'button', id: 'redo-failed', onclick: () => run('Redo failed nodes', () => api.redo({ template_id: id, failed_only: true })) }, 'Redo failed only'));
  redoForm.addEventListener('submit', (e) => {
    e.preventDefault();
    const scope = nodeList(redoNodes.value);
    run(scope.length ? 'Redo on ' + scope.join(', ') : 'Redo on all nodes', () => api.redo({ template_id: id, distribution_scope: scope.length ? scope : undefined }));
  });

  const alias = h('input', { id: 'alias-input', placeholder: 'alias', 'aria-label': 'Alias' });
  const aliasForm = h('form', { id: 'alias-form' },
    h('strong', {}, 'Alias '), alias, ' ',
    h('button', { type: 'submit', id: 'alias-submit', title: 'Sets it here; an alias another template holds moves here (the release step)' }, 'Set or move here'), ' ',
    h('button', { type: 'button', id: 'alias-clear', onclick: () => run('Clear alias', () => api.setAlias(id, null)) }, 'Clear'));
  aliasForm.addEventListener('submit', (e) => {
    e.preventDefault();
    const a = alias.value.trim();
    if (a) {
      run('Alias ' + a, () => api.setAlias(id, a));
    }
  });

  const mergeForm = h('form', { id: 'merge-form' },
    h('strong', {}, 'Merge '), h('span', { class: 'small muted' }, "move the artifact into the data plane's store "),
    h('button', { type: 'submit', id: 'merge-submit' }, 'Merge'));
  mergeForm.addEventListener('submit', (e) => {
    e.preventDefault();
    run('Merge', () => api.merge(id));
  });

  return h('section', { id: 'actions', class: 'card actions' }, h('h2', {}, 'Actions'), redoForm, aliasForm, mergeForm, out);
}

function renderTemplate(head, replicasEl, requestEl, t) {
  clear(head);
  head.append(dl([
    ['Status', statusBadge(t.status)],
    ['Alias', t.alias],
    ['Image', t.image_info],
    ['Created', when(t.created_at)],
    ['Instance type', t.instance_type],
    ['Version', t.version],
    ['Last error', t.last_error],
  ]));
  clear(replicasEl);
  const reps = t.replicas || [];
  replicasEl.append(h('h2', {}, 'Replicas'), reps.length === 0 ? h('p', {}, 'No node holds a copy yet.') :
    h('div', { class: 'table-wrap' }, h('table', { id: 'replica-table' },
      h('thead', {}, h('tr', {}, ['Node', 'Address', 'Status', 'Phase', 'Artifact', 'Error'].map((c) => h('th', { scope: 'col' }, c)))),
      h('tbody', {}, reps.map((r) => h('tr', {},
        h('td', {}, r.node_id), h('td', {}, r.node_ip || ''), h('td', {}, statusBadge(r.status)), h('td', {}, r.phase || ''),
        h('td', { class: 'mono' }, r.artifact_id || ''),
        h('td', { class: 'error' }, [r.last_error_phase, r.error_message].filter(Boolean).join(': '))))))));
  clear(requestEl);
  requestEl.append(h('h2', {}, 'Stored request'),
    t.create_request ? h('pre', { id: 'stored-request' }, JSON.stringify(t.create_request, null, 2)) : h('p', {}, 'None stored.'));
}

function renderJob(el, j) {
  clear(el);
  const pct = Math.max(0, Math.min(100, Number(j.progress) || 0));
  const art = j.artifact || {};
  el.append(
    h('h2', {}, 'Latest job'),
    dl([
      ['Job', h('span', { class: 'mono', id: 'job-id' }, hashLink('/b/', j.job_id || '', j.job_id))],
      ['Operation', j.operation],
      ['Status', h('span', { id: 'job-status' }, statusBadge(j.status))],
      ['Phase', h('span', { id: 'job-phase' }, j.phase || '')],
      ['Progress', h('span', {}, h('progress', { id: 'job-progress', max: 100, value: pct }), ` ${pct}%`)],
      ['Pulled', j.pull_total_bytes ? `${bytes(j.pull_downloaded_bytes || 0)} of ${bytes(j.pull_total_bytes)}, ${j.pull_completed_layers || 0} of ${j.pull_total_layers || 0} layers` : ''],
      ['Nodes', j.expected_node_count ? `${j.ready_node_count || 0} ready, ${j.failed_node_count || 0} failed of ${j.expected_node_count}` : ''],
      ['Error', j.error_message ? h('span', { class: 'error', id: 'job-error' }, j.error_message) : ''],
    ]));
  const phases = Object.entries(j.phase_durations_ms || {});
  if (phases.length) {
    el.append(h('h3', {}, 'Phase durations'), h('table', { id: 'phase-table' },
      h('tbody', {}, phases.map(([p, ms]) => h('tr', {}, h('th', { scope: 'row' }, p), h('td', {}, duration(ms)))))));
  }
  if ((j.nodes || []).length) {
    el.append(h('h3', {}, 'Nodes of this job'), h('table', { id: 'job-nodes' },
      h('tbody', {}, j.nodes.map((n) => h('tr', {}, h('td', {}, n.node_id), h('td', {}, statusBadge(n.status)), h('td', { class: 'error' }, n.error || ''))))));
  }
  el.append(h('h3', {}, 'Artifact'), art.artifact_id ? dl([
    ['Artifact', h('span', { class: 'mono', id: 'artifact-id' }, art.artifact_id)],
    ['SHA-256', h('span', { class: 'mono' }, art.ext4_sha256 || '')],
    ['Size', art.ext4_size_bytes ? bytes(art.ext4_size_bytes) : ''],
    // Every artifact is a raw ext4 image; the builder's Format names the
    // builder and the versions of its output, when it was recorded.
    ['Format', h('span', { id: 'artifact-format' }, 'ext4 (raw)')],
    ['Builder', h('span', { class: 'mono', id: 'artifact-builder' }, art.builder || 'unknown (not recorded)')],
    ['Writable layer', art.writable_layer_size],
    ['Status', art.status],
  ]) : h('p', {}, 'Not built yet.'));
}

function deleteForm(id) {
  const confirm = h('input', { id: 'delete-confirm', autocomplete: 'off', 'aria-label': 'Type the template id to confirm' });
  const button = h('button', { type: 'submit', id: 'delete-submit', class: 'danger', disabled: true }, 'Delete');
  const out = h('p', { id: 'delete-result', role: 'status' });
  confirm.addEventListener('input', () => { button.disabled = confirm.value !== id; });
  const form = h('form', { id: 'delete-form', class: 'card' },
    h('h2', {}, 'Delete'),
    h('p', {}, 'Deletes the template from every node and the stores. Type its id, ', h('code', {}, id), ', to confirm.'),
    confirm, ' ', button, out);
  form.addEventListener('submit', async (e) => {
    e.preventDefault();
    if (confirm.value !== id) {
      return;
    }
    button.disabled = true;
    out.className = '';
    out.textContent = 'Deleting…';
    try {
      await api.deleteTemplate(id);
      location.hash = '#/';
    } catch (err) {
      out.className = 'error';
      out.textContent = 'Not deleted: ' + err.message;
      button.disabled = false;
    }
  });
  return form;
}

// ---- start ----

document.getElementById('auth-form').addEventListener('submit', (e) => {
  e.preventDefault();
  api.setToken(document.getElementById('auth-token').value.trim());
  document.getElementById('auth-token').value = '';
  document.getElementById('auth').hidden = true;
  document.getElementById('forget-token').hidden = !api.token();
  route();
});
document.getElementById('forget-token').addEventListener('click', () => {
  api.setToken('');
  document.getElementById('forget-token').hidden = true;
  route();
});
document.getElementById('forget-token').hidden = !api.token();
window.addEventListener('hashchange', route);
route();
