// Query log: search with the API's filters (newest first, page by page), a live tail, "why
// blocked" through the blocking check, and one-click allow/block of a name into a chosen list.
import { h, add, api, get, qs, can, field, table, say, errorText, fmtTime, showFieldError } from "../app.js";

const FILTERS = [
  ["qname", "Name (exact)"], ["suffix", "Name or below"], ["client", "Client"],
  ["qtype", "Type"], ["rcode", "Rcode"], ["from", "From (RFC 3339)"], ["to", "To"],
];
const CHOICES = {
  blocked: ["", "true", "false"],
  transport: ["", "udp", "tcp", "dot", "doh", "doq", "doh3"],
  source: ["", "cache", "upstream", "stale", "local", "policy", "dropped"],
};

// Adds `name` to the first inline source of list `listName` (a new inline source if none).
export async function addToList(listName, name) {
  const list = await get(`/blocklists/${encodeURIComponent(listName)}`);
  const sources = (list.spec.sources || []).map((s) => ({ ...s }));
  const entry = name.replace(/\.$/, "");
  let inline = sources.find((s) => Array.isArray(s.inline));
  if (!inline) { inline = { inline: [] }; sources.push(inline); }
  if (!inline.inline.includes(entry)) inline.inline = [...inline.inline, entry];
  return api("PATCH", `/blocklists/${encodeURIComponent(listName)}`,
    { metadata: { resourceVersion: list.metadata.resourceVersion }, spec: { sources } });
}

export async function render(main) {
  const inputs = {};
  const form = h("form", { class: "inline", id: "ql-search" });
  for (const [k, label] of FILTERS) {
    inputs[k] = h("input", { name: k, "data-key": k, size: k === "from" || k === "to" ? 22 : 14 });
    form.append(field(label, inputs[k]));
  }
  for (const [k, opts] of Object.entries(CHOICES)) {
    inputs[k] = h("select", { name: k, "data-key": k }, opts.map((o) => h("option", { value: o }, o || "any")));
    form.append(field(k[0].toUpperCase() + k.slice(1), inputs[k]));
  }
  const tailBtn = h("button", { type: "button", class: "secondary", id: "tail", "aria-pressed": "false" }, "Live tail");
  form.append(h("div", { class: "row" }, h("button", { type: "submit" }, "Search"), tailBtn));

  let lists = [];
  try { lists = (await get("/blocklists")).items || []; } catch { /* shown empty */ }
  const listSel = h("select", { id: "target-list" }, lists.map((l) =>
    h("option", { value: l.metadata.name }, `${l.metadata.name} (${l.spec.mode || "deny"})`)));
  const why = h("section", { id: "why", "aria-live": "polite", "aria-label": "Why blocked" });
  const results = h("div", { id: "results" });
  const more = h("button", { type: "button", class: "secondary", hidden: true }, "Older entries");
  // Folded on a phone, so the entries come first.
  const filtersBox = h("details", { id: "filters", open: !window.matchMedia("(max-width: 600px)").matches },
    h("summary", {}, "Filters and live tail"), form);
  add(main, filtersBox,
    can("objects.write") && lists.length ? h("div", { class: "row" }, field("Allow/block into list", listSel)) : null,
    why, results, more);

  const filters = () => {
    const f = {};
    for (const [k, el] of Object.entries(inputs)) if (el.value.trim()) f[k] = el.value.trim();
    return f;
  };

  function row(e) {
    const acts = [h("button", { type: "button", class: "secondary why", onclick: () => explain(e) }, "Why?")];
    if (can("objects.write") && lists.length) {
      acts.push(h("button", { type: "button", class: "secondary", onclick: () => addTo(e.qname) }, "Add to list"));
    }
    return [fmtTime(e.time), e.client || "", e.transport, e.source, e.qtype, e.rcode || "dropped",
      h("span", { class: "mono" }, e.qname), e.flags && e.flags.blocked ? h("span", { class: "pill fail" }, `blocked by ${e.policy || ""}/${e.list || ""}`) : (e.answer || ""),
      h("span", { class: "row" }, acts)];
  }
  const HEAD = ["time", "client", "transport", "source", "type", "rcode", "name", "answer / reason", "actions"];

  async function explain(e) {
    try {
      const r = await get("/blocking/check" + qs({ name: e.qname, client: e.client && !e.client.startsWith("p-") && !e.client.includes("/") ? e.client : "", clientId: e.clientId || "" }));
      why.replaceChildren(h("h2", {}, `Why: ${r.name}`),
        h("p", { id: "verdict" }, `Verdict: ${r.verdict}`, r.policy ? ` by policy ${r.policy}` : "", r.list ? `, list ${r.list}` : "", r.rule ? `, rule ${r.rule}` : ""),
        h("p", {}, `Client ${r.client} in groups ${(r.groups || []).join(", ") || "none"}; policies in effect: ${(r.policies || []).join(", ") || "none"}.`));
      why.querySelector("h2").setAttribute("tabindex", "-1");
      why.querySelector("h2").focus();
    } catch (err) { say(errorText(err), "error"); }
  }

  async function addTo(name) {
    const list = listSel.value;
    try {
      await addToList(list, name);
      say(`${name} added to ${list}.`, "ok");
    } catch (err) { say(errorText(err), "error"); }
  }

  let cursor = null;
  let rows = [];
  async function search(append) {
    const f = { ...filters(), limit: 50 };
    if (append && cursor) f.cursor = cursor;
    try {
      const r = await get("/querylog" + qs(f));
      rows = append ? rows.concat(r.entries) : r.entries;
      cursor = r.next;
      more.hidden = !cursor;
      results.replaceChildren(table(`${rows.length} entries, newest first`, HEAD, rows.map(row)));
      say(`${rows.length} entries.`);
    } catch (err) { showFieldError(form, err); }
  }
  form.addEventListener("submit", (ev) => { ev.preventDefault(); stopTail(); search(false); });
  more.addEventListener("click", () => search(true));

  let tail = null;
  function stopTail() {
    if (tail) { tail.abort(); tail = null; }
    tailBtn.setAttribute("aria-pressed", "false");
    tailBtn.textContent = "Live tail";
  }
  async function startTail() {
    const ctrl = new AbortController();
    tail = ctrl;
    tailBtn.setAttribute("aria-pressed", "true");
    tailBtn.textContent = "Stop tail";
    const live = [];
    results.replaceChildren(h("p", {}, "Waiting for queries…"));
    say("Live tail on.");
    try {
      const res = await fetch("/api/v1/querylog/tail" + qs(filters()), { signal: ctrl.signal, credentials: "same-origin" });
      if (!res.ok) throw new Error(`tail: HTTP ${res.status}`);
      const reader = res.body.getReader();
      const dec = new TextDecoder();
      let buf = "";
      let lost = 0;
      for (;;) {
        const { value, done } = await reader.read();
        if (done) break;
        buf += dec.decode(value, { stream: true });
        let nl;
        while ((nl = buf.indexOf("\n")) >= 0) {
          const line = buf.slice(0, nl); buf = buf.slice(nl + 1);
          if (!line.trim()) continue;
          let e; try { e = JSON.parse(line); } catch { continue; }
          if (e.lost) { lost += e.lost; continue; }
          live.unshift(e);
          if (live.length > 200) live.pop();
        }
        results.replaceChildren(table(`live: ${live.length} newest entries${lost ? `, ${lost} lost` : ""}`, HEAD, live.map(row)));
      }
    } catch (err) {
      if (err.name !== "AbortError") say(errorText(err), "error");
    }
    if (tail === ctrl) stopTail();
  }
  tailBtn.addEventListener("click", () => (tail ? stopTail() : startTail()));

  await search(false);
  return stopTail;
}
