// What every view shares: the view element, the route generation (a
// change of route stops the old view's polls), polling, errors and the
// token prompt.

import * as api from './api.js';
import { h, clear } from './dom.js';

export const pollMS = 1500;
export const view = document.getElementById('view');
export const nav = { generation: 0 };

// schedule runs fn after ms unless the route changed meanwhile.
export function schedule(gen, fn, ms = pollMS) {
  setTimeout(() => {
    if (gen === nav.generation) {
      fn();
    }
  }, ms);
}

// showError puts an error in el; an AuthError opens the token form.
export function showError(el, err) {
  if (err instanceof api.AuthError) {
    askToken(err.message);
  }
  clear(el);
  el.appendChild(h('p', { class: 'error', role: 'alert' }, err.message || String(err)));
}

export function askToken(msg) {
  const auth = document.getElementById('auth');
  auth.hidden = false;
  document.getElementById('auth-error').textContent = api.token() ? 'The token was refused: ' + msg : '';
  document.getElementById('auth-token').focus();
}

export function dl(pairs) {
  return h('dl', {}, pairs.filter(([, v]) => v !== undefined && v !== null && v !== '').map(([k, v]) => [h('dt', {}, k), h('dd', {}, v)]));
}

// redacted is a JSON text of v with every download token hidden: a
// preview or request shown on screen carries no credential.
export function redacted(v) {
  return JSON.stringify(v, (k, val) => {
    if (typeof val !== 'string') {
      return val;
    }
    if (/token|password|secret/i.test(k)) {
      return 'REDACTED';
    }
    return val.replace(/([?&]token=)[^&]*/g, '$1REDACTED');
  }, 2);
}

// actionResult shows the outcome of an action in out.
export function actionResult(out, ok, msg) {
  out.className = ok ? 'ok' : 'error';
  out.textContent = msg;
}
