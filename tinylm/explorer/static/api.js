// The plugin's JSON routes (tinylm/explorer, /data/plugin/tinylm/<route>). The routes are resolved
// against this module's own URL, which TensorBoard serves from the plugin's folder, so they work
// under any path prefix TensorBoard is served at. A page with no server (a saved view: a notebook
// cell, a file; page.js) sets a host instead, which answers the same questions from what it holds.

/** An answer of {"error": ...} or a failed request, with its one-line message. */
export class ApiError extends Error {}

const cache = new Map(); // url -> Promise of the JSON: the same question is asked once
const CACHE_LIMIT = 200;
let host = null; // { get(route, params) -> Promise of the JSON }, in place of the routes

/** Answer every question with host.get(route, params) from now on, instead of asking the routes. */
export function setHost(answering) {
  host = answering;
}

/** The JSON of route?params; throws ApiError with the server's message on {"error": ...}. Answers that
 * can change while TensorBoard runs (runs, training, heads: a run still training) are asked with fresh. */
export function get(route, params = {}, { fresh = false } = {}) {
  if (host) return host.get(route, params);
  const url = new URL(route, import.meta.url);
  for (const [key, value] of Object.entries(params)) {
    if (value !== undefined && value !== null && value !== "") url.searchParams.set(key, value);
  }
  const key = url.toString();
  if (fresh) return fetchJSON(key);
  if (!cache.has(key)) {
    if (cache.size >= CACHE_LIMIT) cache.delete(cache.keys().next().value);
    const answer = fetchJSON(key);
    answer.catch(() => cache.delete(key)); // ask again next time
    cache.set(key, answer);
  }
  return cache.get(key);
}

async function fetchJSON(url) {
  let reply;
  try {
    reply = await fetch(url, { headers: { Accept: "application/json" } });
  } catch (e) {
    throw new ApiError(`could not reach TensorBoard (${e.message}): is it still running?`);
  }
  let body = null;
  try {
    body = await reply.json();
  } catch {
    throw new ApiError(`${reply.status} ${reply.statusText}: the answer was not JSON`);
  }
  if (body && typeof body.error === "string") throw new ApiError(body.error);
  if (!reply.ok) throw new ApiError(`${reply.status} ${reply.statusText}`);
  return body;
}
