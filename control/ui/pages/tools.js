// Tools: the doctor report, diagnoses, the lameduck state (GET /api/v1/lameduck) and readiness,
// the blocking check for any name and client, and the cache (stats, flush).
import { h, api, get, qs, can, field, table, say, errorText, showFieldError } from "../app.js";

export async function render(main) {
  const [doctor, info, lameduck] = await Promise.all([get("/doctor"), get("/info/messages"), get("/lameduck")]);
  const readiness = (doctor.checks || []).find((c) => c.name === "readiness");
  main.append(
    h("h2", {}, "Lameduck and readiness"),
    h("p", { id: "lameduck" }, h("span", { class: "pill " + (lameduck.lameduck ? "warn" : "ok") }, lameduck.lameduck ? "Lameduck (draining)" : "Serving"),
      readiness ? ` Readiness: ${readiness.message}` : ""),
    h("p", { id: "lameduck-how" }, "Lameduck is entered and left only on the ops listener, from loopback (POST or DELETE /lameduck on the node itself), not through this page or the API."),
    h("h2", {}, `Doctor: ${doctor.counts.ok} ok, ${doctor.counts.warn} warn, ${doctor.counts.fail} fail`),
    table(null, ["check", "status", "message"], doctor.checks.map((c) => [c.name, h("span", { class: "pill " + c.status }, c.status), c.message])),
    h("h2", {}, "Diagnoses"),
    table(null, ["severity", "message"], (info.messages || []).map((m) => [m.severity, m.message || JSON.stringify(m)])));

  const nameIn = h("input", { "data-key": "name", required: true, placeholder: "ads.example.com" });
  const clientIn = h("input", { "data-key": "client", placeholder: "192.0.2.7" });
  const out = h("div", { "aria-live": "polite", id: "check-result" });
  const form = h("form", { class: "inline", id: "check" }, field("Name", nameIn), field("Client address", clientIn),
    h("button", { type: "submit" }, "Check"));
  form.addEventListener("submit", async (ev) => {
    ev.preventDefault();
    try {
      const r = await get("/blocking/check" + qs({ name: nameIn.value.trim(), client: clientIn.value.trim() }));
      out.replaceChildren(h("p", {}, `${r.name}: ${r.verdict}`, r.policy ? ` by policy ${r.policy}` : "", r.list ? `, list ${r.list}` : "", r.rule ? `, rule ${r.rule}` : "",
        `; groups ${(r.groups || []).join(", ")}; policies ${(r.policies || []).join(", ") || "none"}`));
    } catch (e) { showFieldError(form, e); }
  });
  main.append(h("h2", {}, "Blocking check"), h("p", {}, "What the policies decide for a name and client."), form, out);

  // A lookup through the node itself (GET /api/v1/lookup: a query to its own UDP listener).
  const lname = h("input", { "data-key": "name", required: true, placeholder: "www.example.com" });
  const ltype = h("input", { "data-key": "type", value: "A", size: 8 });
  const lout = h("div", { "aria-live": "polite", id: "lookup-result" });
  const lform = h("form", { class: "inline", id: "lookup" }, field("Name", lname), field("Type", ltype), h("button", { type: "submit" }, "Look up"));
  lform.addEventListener("submit", async (ev) => {
    ev.preventDefault();
    try {
      const r = await get("/lookup" + qs({ name: lname.value.trim(), type: ltype.value.trim() }));
      const rows = [...(r.answers || []).map((x) => ["answer", x]), ...(r.authority || []).map((x) => ["authority", x])];
      lout.replaceChildren(h("p", { id: "lookup-status" }, `${r.name} ${r.type}: ${r.rcode} (${(r.flags || []).join(" ")}) from ${r.server} in ${r.timeMs} ms`),
        table(null, ["section", "name", "TTL", "type", "data"], rows.map(([sec, x]) => [sec, h("span", { class: "mono" }, x.name), String(x.ttl), x.type, h("span", { class: "mono" }, x.data)])));
    } catch (e) { showFieldError(lform, e); }
  });
  main.append(h("h2", {}, "Lookup through this node"), lform, lout);

  const cacheBox = h("div", {});
  async function cache() {
    const c = await get("/cache");
    cacheBox.replaceChildren(table(null, ["core", "entries", "capacity", "hits", "misses"],
      c.cores.map((x) => [String(x.core), String(x.entries ?? x.error), String(x.capacity ?? ""), String(x.hits ?? ""), String(x.misses ?? "")])));
  }
  main.append(h("h2", {}, "Cache"), cacheBox);
  if (can("cache.flush")) {
    const flushName = h("input", { "data-key": "name", placeholder: "empty: everything" });
    const sub = h("input", { type: "checkbox", id: "flush-subtree" });
    const flush = h("form", { class: "inline", id: "flush" }, field("Flush name", flushName),
      h("div", { class: "field" }, h("label", { for: "flush-subtree" }, sub, " and below")),
      h("button", { type: "submit", class: "danger" }, "Flush"));
    flush.addEventListener("submit", async (ev) => {
      ev.preventDefault();
      try {
        const r = await api("DELETE", "/cache" + qs({ name: flushName.value.trim(), subtree: flushName.value.trim() ? String(sub.checked) : "" }));
        say(`Removed ${r.body.removed} entries.`, "ok");
        await cache();
      } catch (e) { say(errorText(e), "error"); }
    });
    main.append(flush);
  }
  await cache();
}
