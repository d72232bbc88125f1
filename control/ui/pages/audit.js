// Audit: who changed what and when, newest first, with the API's filters.
import { h, get, qs, field, table, fmtTime, showFieldError } from "../app.js";

export async function render(main) {
  const inputs = { actor: h("input", { "data-key": "actor", placeholder: "token:1a2b3c4d" }), kind: h("input", { "data-key": "kind", placeholder: "BlockList" }),
    name: h("input", { "data-key": "name" }), since: h("input", { "data-key": "since", placeholder: "RFC 3339" }) };
  const form = h("form", { class: "inline", id: "audit-filter" }, field("Actor", inputs.actor), field("Kind", inputs.kind), field("Name", inputs.name),
    field("Since", inputs.since), h("button", { type: "submit" }, "Filter"));
  const out = h("div", {});
  main.append(form, out);
  async function load() {
    const p = { limit: 10000 };
    for (const [k, el] of Object.entries(inputs)) p[k] = el.value.trim();
    try {
      const recs = ((await get("/audit" + qs(p))).records || []).reverse().slice(0, 300);
      out.replaceChildren(table(`${recs.length} newest records`, ["time", "actor", "verb", "kind", "name", "change"],
        recs.map((r) => [fmtTime(r.time), r.actor, r.verb, r.kind, r.name,
          h("details", {}, h("summary", {}, `rv ${r.resourceVersionBefore ?? ""} → ${r.resourceVersionAfter ?? ""}`), h("pre", { class: "mono" }, JSON.stringify(r.patch ?? r, null, 1)))])));
    } catch (e) { showFieldError(form, e); }
  }
  form.addEventListener("submit", (ev) => { ev.preventDefault(); load(); });
  await load();
}
