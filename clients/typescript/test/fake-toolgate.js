// A stand-in for toolgate's HTTP API in the client's unit tests: each test
// scripts the answers, by route, and reads what the client sent. It answers
// with the statuses and bodies the real server sends (docs/api.md).
import { createServer } from 'node:http';

export async function fakeToolgate(routes) {
  const requests = [];
  const server = createServer(async (req, res) => {
    let raw = '';
    for await (const chunk of req) raw += chunk;
    const url = new URL(req.url, 'http://fake');
    const key = `${req.method} ${url.pathname}`;
    const entry = { method: req.method, path: url.pathname, query: Object.fromEntries(url.searchParams), headers: req.headers, body: raw ? JSON.parse(raw) : undefined };
    requests.push(entry);
    const route = routes[key];
    if (!route) {
      res.writeHead(404, { 'content-type': 'application/json' });
      res.end(JSON.stringify({ error: { code: 'not_found', message: `no route ${key}` } }));
      return;
    }
    const answer = typeof route === 'function' ? await route(entry, requests) : route;
    // A list answers in turn, its last answer for good.
    const next = Array.isArray(answer) ? (answer.length > 1 ? answer.shift() : answer[0]) : answer;
    const { status = 200, body, headers = {}, raw: rawBody } = next;
    res.writeHead(status, { 'content-type': rawBody === undefined ? 'application/json' : 'text/html', ...headers });
    res.end(rawBody ?? (body === undefined ? '' : JSON.stringify(body)));
  });
  await new Promise((resolve) => server.listen(0, '127.0.0.1', resolve));
  const url = `http://127.0.0.1:${server.address().port}`;
  return { url, requests, close: () => new Promise((resolve) => server.close(resolve)) };
}

/** An API error body, as toolgate writes it. */
export function apiError(status, code, message, headers) {
  return { status, body: { error: { code, message } }, headers };
}
