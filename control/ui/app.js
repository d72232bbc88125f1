// The dashboard's shell: the API client (session cookie + CSRF header), the hash router, the
// sign-in page and the small DOM helpers every page uses. No framework: pages are ES modules
// exporting `render(main, ctx)` (and optionally returning a cleanup function).

const ROLES = { viewer: 0, operator: 1, admin: 2 };
// What each role adds to the one before (docs/api.md, "Tokens and roles").
const ROLE_PERMISSIONS = [
  ["settings.read", "upstreams.read", "info.read", "objects.read", "cache.read"],
  ["settings.write", "lists.refresh", "objects.write", "audit.read", "cache.dump", "cache.flush", "querylog.read"],
  ["node.write", "querylog.delete", "objects.admin", "tokens.admin"],
];
const session = { role: null, csrf: null, tokenId: null, expiresAt: null, permissions: null };

// Builds an element: h("button", {type: "button", onclick: f}, "text", child…). Text is
// always set as text, never parsed as HTML.
export function h(tag, attrs, ...children) {
  const el = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === null || v === undefined || v === false) continue;
    if (k.startsWith("on")) el.addEventListener(k.slice(2), v);
    else if (k === "class") el.className = v;
    else if (v === true) el.setAttribute(k, "");
    else el.setAttribute(k, String(v));
  }
  append(el, children);
  return el;
}

// Element.append/replaceChildren that skip null, undefined and false (the DOM's own would
// insert the text "null").
export function add(el, ...children) { append(el, children); return el; }
export function put(el, ...children) { el.replaceChildren(); append(el, children); return el; }

function append(el, children) {
  for (const c of children) {
    if (c === null || c === undefined || c === false) continue;
    if (Array.isArray(c)) append(el, c);
    else el.append(c instanceof Node ? c : document.createTextNode(String(c)));
  }
}

// A table from column headers and rows of cells.
export function table(caption, headers, rows) {
  return h("div", { class: "scroll" },
    h("table", {},
      caption ? h("caption", {}, caption) : null,
      h("thead", {}, h("tr", {}, headers.map((x) => h("th", { scope: "col" }, x)))),
      h("tbody", {}, rows.length ? rows.map((r) => h("tr", {}, r.map((c, i) => h("td", { "data-label": headers[i] }, c))))
        : h("tr", {}, h("td", { colspan: headers.length }, "nothing yet")))));
}

// Announces a message in the live region.
export function say(text, kind) {
  const s = document.getElementById("status");
  s.textContent = text;
  s.className = "status " + (kind || "");
}

export class ApiError extends Error {
  constructor(status, body) {
    super((body && body.message) || `HTTP ${status}`);
    this.status = status;
    this.body = body || {};
  }
}

// Calls the node's API. Non-GET requests carry the session's CSRF token. `body` is sent as
// JSON, or `opts.text` as is with `opts.contentType`. Answers {status, body}; throws
// ApiError on 4xx/5xx (after sending a 401 back to sign-in).
export async function api(method, path, body, opts) {
  const headers = { Accept: "application/json" };
  if (method !== "GET" && method !== "HEAD" && session.csrf) headers["X-CSRF-Token"] = session.csrf;
  const raw = opts && opts.text;
  if (raw !== undefined) headers["Content-Type"] = opts.contentType || "text/plain";
  else if (body !== undefined) headers["Content-Type"] = "application/json";
  const res = await fetch("/api/v1" + path, {
    method, headers, credentials: "same-origin", signal: opts && opts.signal,
    body: raw !== undefined ? raw : body === undefined ? undefined : JSON.stringify(body),
  });
  const text = res.status === 204 ? "" : await res.text();
  let data = null;
  try { data = text ? JSON.parse(text) : null; } catch { data = { message: text }; }
  if (res.status === 401 && !(opts && opts.noRedirect)) {
    clear();
    showSignin("Your session ended: sign in again.");
  }
  if (res.status >= 400) throw new ApiError(res.status, data);
  return { status: res.status, body: data };
}

export const get = (path, opts) => api("GET", path, undefined, opts).then((r) => r.body);

// The query string of the non-empty fields of an object.
export function qs(params) {
  const u = new URLSearchParams();
  for (const [k, v] of Object.entries(params)) if (v !== "" && v !== null && v !== undefined) u.set(k, v);
  const s = u.toString();
  return s ? "?" + s : "";
}

// `what` is a permission (`objects.write`: from the session's `permissions`) or a role (at
// least that role). The server checks every request anyway: this only hides controls.
export function can(what) {
  if (session.role === null) return false;
  if (what.includes(".")) return session.permissions ? session.permissions.includes(what) : false;
  return ROLES[session.role] >= ROLES[what];
}

export function errorText(e) {
  if (e instanceof ApiError) return `${e.status} ${e.body.code || ""}: ${e.body.message || e.message}`;
  return String(e && e.message ? e.message : e);
}

// Shows an API error: at the field whose data-key matches the error's `key` (or its prefix,
// `spec.clients[2]` → `spec.clients`), else in the form's own error line.
export function showFieldError(form, e) {
  for (const el of form.querySelectorAll(".field-error")) el.remove();
  for (const el of form.querySelectorAll("[aria-invalid]")) el.removeAttribute("aria-invalid");
  const key = e instanceof ApiError ? e.body.key : null;
  let target = null;
  if (key) {
    for (const el of form.querySelectorAll("[data-key]")) {
      const k = el.dataset.key;
      if (key === k || key.startsWith(k + "[") || key.startsWith(k + ".")) { target = el; break; }
    }
  }
  const id = "err-" + Math.random().toString(36).slice(2);
  const msg = h("p", { class: "field-error", id, role: "alert" }, errorText(e));
  if (target) {
    target.setAttribute("aria-invalid", "true");
    target.setAttribute("aria-describedby", id);
    target.insertAdjacentElement("afterend", msg);
    target.focus();
  } else {
    form.prepend(msg);
  }
}

export function field(label, input, hint) {
  const id = input.id || (input.id = "f-" + Math.random().toString(36).slice(2));
  return h("div", { class: "field" }, h("label", { for: id }, label), input,
    hint ? h("small", {}, hint) : null);
}

export function fmtTime(t) {
  if (!t) return "";
  const d = new Date(t);
  return isNaN(d) ? String(t) : d.toLocaleString();
}

function clear() {
  session.role = session.csrf = session.tokenId = session.expiresAt = session.permissions = null;
}

const PAGES = [
  ["overview", "Overview", "viewer"],
  ["querylog", "Query log", "querylog.read"],
  ["blocklists", "Lists", "viewer"],
  ["clientgroups", "Client groups", "viewer"],
  ["policies", "Policies", "viewer"],
  ["zones", "Zones", "viewer"],
  ["settings", "Settings", "viewer"],
  ["tools", "Tools", "viewer"],
  ["audit", "Audit", "audit.read"],
  ["tokens", "Tokens", "tokens.admin"],
];

const MODULES = {
  overview: "./pages/overview.js", querylog: "./pages/querylog.js", blocklists: "./pages/objects.js",
  clientgroups: "./pages/objects.js", policies: "./pages/objects.js", zones: "./pages/zones.js",
  settings: "./pages/settings.js", tools: "./pages/tools.js", audit: "./pages/audit.js",
  tokens: "./pages/tokens.js",
};

let cleanup = null;
let generation = 0;

function setNav() {
  const nav = document.getElementById("nav");
  const page = location.hash.replace(/^#\//, "").split("?")[0] || "overview";
  nav.replaceChildren(h("ul", {}, PAGES.filter(([, , r]) => can(r)).map(([id, label]) =>
    h("li", {}, h("a", { href: "#/" + id, "aria-current": id === page ? "page" : null }, label)))));
  nav.hidden = false;
  document.getElementById("who").hidden = false;
  document.getElementById("role").textContent = `${session.role} · token ${session.tokenId || ""}`;
}

async function route() {
  if (!session.role) return;
  if (cleanup) { try { cleanup(); } catch { /* a page's cleanup must not stop navigation */ } cleanup = null; }
  const [name, query] = (location.hash.replace(/^#\//, "") || "overview").split("?");
  const page = PAGES.find(([id]) => id === name);
  const main = document.getElementById("main");
  setNav();
  say("");
  if (!page) { main.replaceChildren(h("h1", { tabindex: "-1" }, "Not found"), h("p", {}, "No such page.")); return; }
  if (!can(page[2])) {
    main.replaceChildren(h("h1", { tabindex: "-1" }, page[1]), h("p", {}, `This page needs the ${page[2]} ${page[2].includes(".") ? "permission" : "role"}.`));
    return;
  }
  const mine = ++generation;
  document.title = `${page[1]} · kudurru`;
  main.replaceChildren(h("h1", { tabindex: "-1" }, page[1]));
  const mod = await import(MODULES[name]);
  if (mine !== generation) return;
  const ctx = { kind: name, params: new URLSearchParams(query || ""), alive: () => mine === generation };
  try {
    const c = await mod.render(main, ctx);
    if (mine === generation) cleanup = typeof c === "function" ? c : null;
    else if (typeof c === "function") c();
  } catch (e) {
    if (!(e instanceof ApiError && e.status === 401)) main.append(h("p", { class: "error", role: "alert" }, errorText(e)));
  }
  const h1 = main.querySelector("h1");
  if (h1 && document.activeElement === document.body) h1.focus({ preventScroll: true });
  document.body.dataset.page = name;
  performance.mark("kudurru:rendered");
}

function showSignin(message) {
  if (cleanup) { try { cleanup(); } catch { /* ignore */ } cleanup = null; }
  generation++;
  document.getElementById("nav").hidden = true;
  document.getElementById("who").hidden = true;
  document.title = "Sign in · kudurru";
  document.body.dataset.page = "signin";
  const input = h("input", { id: "token", name: "token", type: "password", autocomplete: "off", required: true, "data-key": "token", spellcheck: "false" });
  const form = h("form", { class: "card signin", id: "signin" },
    field("API token", input, "A token from `kudurru token create --role viewer|operator|admin`. It is exchanged for a session cookie and not kept by the page."),
    h("button", { type: "submit" }, "Sign in"));
  form.addEventListener("submit", async (ev) => {
    ev.preventDefault();
    try {
      const r = await api("POST", "/session", { token: input.value.trim() }, { noRedirect: true });
      adopt(r.body);
      input.value = "";
      if (!location.hash || location.hash === "#/signin") location.hash = "#/overview";
      else route();
    } catch (e) {
      showFieldError(form, e instanceof ApiError && e.status === 401 ? new ApiError(401, { key: "token", message: "That token was not accepted (unknown, revoked or expired)." }) : e);
    }
  });
  put(document.getElementById("main"), h("h1", { tabindex: "-1" }, "Sign in"),
    message ? h("p", { role: "alert" }, message) : null, form);
  input.focus();
}

function adopt(s) {
  session.role = s.role in ROLES ? s.role : "viewer";
  session.csrf = s.csrfToken || null;
  session.tokenId = s.tokenId || null;
  session.expiresAt = s.expiresAt || null;
  // Older servers answer no list: derive it from the role as docs/api.md describes.
  session.permissions = Array.isArray(s.permissions) ? s.permissions : ROLE_PERMISSIONS.slice(0, ROLES[session.role] + 1).flat();
}

async function signOut() {
  try { await api("DELETE", "/session", undefined, { noRedirect: true }); } catch { /* gone already */ }
  clear();
  showSignin("Signed out.");
}

async function start() {
  document.getElementById("signout").addEventListener("click", signOut);
  window.addEventListener("hashchange", route);
  try {
    const r = await api("GET", "/session", undefined, { noRedirect: true });
    adopt(r.body);
    route();
  } catch {
    showSignin();
  }
}

start();
