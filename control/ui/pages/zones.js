// Zones: the Zone objects with their serials and load state, the records a zone serves now,
// a records editor through RecordSet objects (/api/v1/recordsets), and a zone-file import
// (POST /api/v1/zones/{name}/import, text/dns): a preview (dryRun) first, then the import.
import { h, api, get, can, field, table, say, errorText, showFieldError } from "../app.js";

export async function render(main) {
  const zonesBox = h("div", { id: "zones" });
  const recs = h("section", { id: "records", "aria-live": "polite", "aria-label": "Records" });
  main.append(zonesBox, recs);

  const zones = (await get("/zones")).items || [];
  zonesBox.replaceChildren(table("Zones", ["name", "apex", "type", "serial", "records", "state", "records"],
    zones.map((z) => {
      const ready = ((z.status || {}).conditions || []).find((c) => c.type === "Ready");
      return [h("span", { class: "mono" }, z.metadata.name), z.spec.zone, z.spec.type, String(z.status.serial ?? ""), String(z.status.records ?? ""),
        ready ? h("span", { class: `pill ${ready.status}`, title: ready.message }, ready.message || ready.status) : "",
        z.spec.type === "forward" ? "" : h("button", { type: "button", class: "secondary", onclick: () => show(z) }, "Records")];
    })));

  async function show(z) {
    try {
      const r = await get(`/zones/${encodeURIComponent(z.metadata.name)}/records?limit=500`);
      const parts = [h("h2", { tabindex: "-1" }, `${r.zone} at serial ${r.serial} (${r.total} records)`),
        table(null, ["name", "TTL", "type", "data"], r.records.map((x) => [h("span", { class: "mono" }, x.name), String(x.ttl), x.type, h("span", { class: "mono" }, x.rdata)]))];
      if (r.continue) parts.push(h("p", {}, "The first 500 records are shown."));
      if (can("objects.write") && z.spec.type === "primary") parts.push(editor(z), importer(z));
      recs.replaceChildren(...parts);
      recs.querySelector("h2").focus();
    } catch (e) { say(errorText(e), "error"); }
  }

  function importer(z) {
    const file = h("textarea", { "data-key": "body", rows: 6, class: "mono", placeholder: "www 300 IN A 192.0.2.10" });
    const result = h("div", { id: "import-result", "aria-live": "polite" });
    const preview = h("button", { type: "submit", value: "preview" }, "Preview");
    const apply = h("button", { type: "submit", value: "import", class: "secondary" }, "Import");
    const form = h("form", { class: "card", id: "import-form" }, h("h2", {}, "Import a zone file"),
      h("p", {}, "The file's records replace this zone's RecordSets (its SOA comes from the Zone object). Preview shows what would change; Import writes it."),
      field("Zone file (master format, names relative to the zone)", file), preview, apply, result);
    form.addEventListener("submit", async (ev) => {
      ev.preventDefault();
      const dry = (ev.submitter || preview).value !== "import";
      const path = `/zones/${encodeURIComponent(z.metadata.name)}/import${dry ? "?dryRun=true" : ""}`;
      try {
        const r = (await api("POST", path, undefined, { text: file.value, contentType: "text/dns" })).body;
        const rows = [...r.create.map((x) => ["create", x.name, x.type, x.records.join(", ")]),
          ...r.update.map((x) => ["update", x.name, x.type, x.records.join(", ")]),
          ...r.delete.map((x) => ["delete", String(x.name), String(x.type), ""])];
        result.replaceChildren(h("p", {}, `${dry ? "Would change" : "Imported"}: ${r.create.length} to create, ${r.update.length} to update, ${r.delete.length} to delete, ${r.unchanged} unchanged.`),
          table(null, ["change", "name", "type", "records"], rows));
        if (!dry) { say(`zone file imported into ${z.metadata.name}`, "ok"); setTimeout(() => show(z), 1000); }
      } catch (e) { showFieldError(form, e); }
    });
    return form;
  }

  function editor(z) {
    const inputs = {
      name: h("input", { "data-key": "spec.name", required: true, placeholder: "www" }),
      type: h("input", { "data-key": "spec.type", required: true, value: "A", size: 6 }),
      ttl: h("input", { "data-key": "spec.ttl", type: "number", min: 0, value: 300, size: 6 }),
      records: h("textarea", { "data-key": "spec.records", rows: 3, placeholder: "192.0.2.10" }),
    };
    const form = h("form", { class: "card", id: "recordset-form" }, h("h2", {}, "Set records"),
      h("p", {}, "Writes a RecordSet object: it replaces this owner and type's records in the zone; no records deletes them."),
      field("Owner (relative, @ or absolute)", inputs.name), field("Type", inputs.type), field("TTL", inputs.ttl),
      field("Records (presentation format, one per line)", inputs.records), h("button", { type: "submit" }, "Save"));
    form.addEventListener("submit", async (ev) => {
      ev.preventDefault();
      const owner = inputs.name.value.trim();
      const type = inputs.type.value.trim().toUpperCase();
      const name = `${z.metadata.name}-${owner === "@" ? "apex" : owner.replace(/[^a-z0-9-]+/gi, "-")}-${type}`.toLowerCase().slice(0, 63).replace(/-+$/, "");
      const spec = { zone: z.metadata.name, name: owner, type, ttl: Number(inputs.ttl.value), records: inputs.records.value.split("\n").map((x) => x.trim()).filter(Boolean) };
      try {
        let existing = null;
        try { existing = await get(`/recordsets/${name}`); } catch { /* new */ }
        if (existing) await api("PATCH", `/recordsets/${name}`, { spec });
        else await api("POST", "/recordsets", { kind: "RecordSet", metadata: { name }, spec });
        say(`recordset ${name} saved; the zone's serial moves on when it is served.`, "ok");
        setTimeout(() => show(z), 1000);
      } catch (e) { showFieldError(form, e); }
    });
    return form;
  }
}
