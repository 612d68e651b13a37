// The public JSON API, called with the operator's token (if any) as the
// Authorization header; no cookie is ever sent.

const tokenKey = 'cube.console.token';

export function token() {
  return sessionStorage.getItem(tokenKey) || '';
}

export function setToken(t) {
  if (t) {
    sessionStorage.setItem(tokenKey, t);
  } else {
    sessionStorage.removeItem(tokenKey);
  }
}

// AuthError: the master refused the credentials (ret_code 130401).
export class AuthError extends Error {}

// APIError: any other answer that is not ret_code 200.
export class APIError extends Error {
  constructor(code, message) {
    super(message);
    this.code = code;
  }
}

export const codeUnauthorized = 130401;
export const codeNotFound = 130404;

// call sends one request and returns the answer's body, or throws
// AuthError or APIError.
export async function call(method, path, body) {
  const headers = { Accept: 'application/json' };
  const t = token();
  if (t) {
    headers.Authorization = 'Bearer ' + t;
  }
  const init = { method, headers, credentials: 'omit', cache: 'no-store', redirect: 'error' };
  if (body !== undefined) {
    headers['Content-Type'] = 'application/json';
    init.body = JSON.stringify(body);
  }
  const resp = await fetch(path, init);
  let data;
  try {
    data = await resp.json();
  } catch {
    throw new APIError(resp.status, `${method} ${path}: HTTP ${resp.status}, not JSON`);
  }
  const ret = data && data.ret;
  if (!ret) {
    throw new APIError(resp.status, `${method} ${path}: HTTP ${resp.status}, no ret block`);
  }
  if (ret.ret_code === codeUnauthorized) {
    throw new AuthError(ret.ret_msg || 'unauthorized');
  }
  if (ret.ret_code !== 200) {
    throw new APIError(ret.ret_code, ret.ret_msg || `ret_code ${ret.ret_code}`);
  }
  return data;
}

export function requestID() {
  return 'console-' + crypto.randomUUID();
}

export const listTemplates = (params) => call('GET', '/cube/template?' + new URLSearchParams(params));
export const getTemplate = (id) =>
  call('GET', '/cube/template?' + new URLSearchParams({ template_id: id, include_request: '1' }));
export const templateJob = (id) => call('GET', '/cube/template/from-image?' + new URLSearchParams({ template_id: id }));
export const getJob = (jobID) => call('GET', '/cube/template/from-image?' + new URLSearchParams({ job_id: jobID }));
export const createFromImage = (req) => call('POST', '/cube/template/from-image', { requestID: requestID(), ...req });
export const deleteTemplate = (id) => call('DELETE', '/cube/template', { RequestID: requestID(), template_id: id });
export const listJobs = (params) => call('GET', '/cube/template/jobs?' + new URLSearchParams(params));
export const jobLog = (jobID) => call('GET', '/cube/template/jobs/log?' + new URLSearchParams({ job_id: jobID }));
export const placementDecisions = (id) => call('GET', '/cube/template/' + encodeURIComponent(id) + '/placement');
export const listNodes = () => call('GET', '/cube/node');
export const redo = (req) => call('POST', '/cube/template/redo', { requestID: requestID(), ...req });
export const setAlias = (id, alias) =>
  call('PUT', '/cube/template/' + encodeURIComponent(id) + '/alias', { requestID: requestID(), alias: alias || null });
export const merge = (id) => call('POST', '/cube/template/migrate', { requestID: requestID(), template_id: id });
export const preview = (id) =>
  call('POST', '/cube/sandbox/preview', { requestID: requestID(), annotations: { 'cube.master.appsnapshot.template.id': id } });
