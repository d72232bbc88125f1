// Lists, client groups and policies: list with status and conditions, create, edit,
// enable/disable (the kudurru.io/enabled annotation), delete, and for lists a refresh that
// shows the API's 202/404/409/503 outcome. Validation errors from the API land at the field.
import { h, add, api, get, can, field, table, say, errorText, fmtTime, showFieldError, ApiError } from "../app.js";

const lines = (s) => s.split("\n").map((x) => x.trim()).filter(Boolean);
const list = (s) => s.split(/[\s,]+/).map((x) => x.trim()).filter(Boolean);

// Per kind: the form's fields (key = the API's field path, so errors land there) and the
// conversions between a spec and the fields' text.
const KINDS = {
  blocklists: {
    kind: "BlockList", title: "Block and allow lists",
    fields: [
      ["spec.sources", "URLs and files", "textarea", "One per line: https://… is fetched, anything else is a file under blocking.fileSourceDir."],
      ["spec.inline", "Inline entries", "textarea", "One rule per line, in the list's format."],
      ["spec.format", "Format", ["auto", "hosts", "domains", "adblock", "wildcard", "rpz"]],
      ["spec.mode", "Mode", ["deny", "allow"]],
      ["spec.refreshInterval", "Refresh interval", "text", "e.g. 24h; empty: blocking.refreshInterval"],
    ],
    toForm: (s) => ({
      "spec.sources": (s.sources || []).filter((x) => x.url || x.file).map((x) => x.url || x.file).join("\n"),
      "spec.inline": (s.sources || []).filter((x) => x.inline).flatMap((x) => x.inline).join("\n"),
      "spec.format": s.format || "auto", "spec.mode": s.mode || "deny", "spec.refreshInterval": s.refreshInterval || "",
    }),
    toSpec: (f) => {
      const sources = lines(f["spec.sources"]).map((x) => (/^https?:\/\//i.test(x) ? { url: x } : { file: x }));
      const inline = lines(f["spec.inline"]);
      if (inline.length) sources.push({ inline });
      const spec = { sources, format: f["spec.format"], mode: f["spec.mode"] };
      spec.refreshInterval = f["spec.refreshInterval"] || null;
      return spec;
    },
    columns: ["entries", "format", "mode"],
    cells: (o) => [String(o.status.entries ?? ""), o.status.format || o.spec.format || "", o.spec.mode || "deny"],
  },
  clientgroups: {
    kind: "ClientGroup", title: "Client groups",
    fields: [
      ["spec.clients", "Clients", "textarea", "Addresses and prefixes, one per line (192.0.2.0/24, 2001:db8::/48)."],
      ["spec.clientIds", "Client IDs", "textarea", "DoH path segments or TLS SNI labels, one per line."],
    ],
    toForm: (s) => ({ "spec.clients": (s.clients || []).join("\n"), "spec.clientIds": (s.clientIds || []).join("\n") }),
    toSpec: (f) => ({ clients: lines(f["spec.clients"]), clientIds: lines(f["spec.clientIds"]) }),
    columns: ["clients", "client IDs"],
    cells: (o) => [(o.spec.clients || []).join(", "), (o.spec.clientIds || []).join(", ")],
  },
  policies: {
    kind: "Policy", title: "Policies",
    fields: [
      ["spec.clientGroups", "Client groups", "text", "Comma-separated; default is every client no other group holds."],
      ["spec.denyLists", "Deny lists", "text", "Comma-separated list names."],
      ["spec.allowLists", "Allow lists", "text", "Comma-separated list names."],
      ["spec.blockResponse", "Block response", ["nxdomain", "nodata", "refused", "null", "addresses (kept as set)"]],
      ["spec.blockTTL", "Block TTL", "text", "e.g. 60s; empty: blocking.blockTTL"],
    ],
    toForm: (s) => ({
      "spec.clientGroups": (s.clientGroups || []).join(", "), "spec.denyLists": (s.denyLists || []).join(", "),
      "spec.allowLists": (s.allowLists || []).join(", "),
      // An {addresses: [...]} answer has no field here: the edit keeps it as it is.
      "spec.blockResponse": s.blockResponse && typeof s.blockResponse === "object" ? "addresses (kept as set)" : s.blockResponse || "nxdomain",
      "spec.blockTTL": s.blockTTL || "",
    }),
    toSpec: (f) => {
      const spec = { clientGroups: list(f["spec.clientGroups"]), denyLists: list(f["spec.denyLists"]), allowLists: list(f["spec.allowLists"]),
        blockTTL: f["spec.blockTTL"] || null };
      if (!f["spec.blockResponse"].startsWith("addresses")) spec.blockResponse = f["spec.blockResponse"];
      return spec;
    },
    columns: ["groups", "deny", "allow", "active"],
    cells: (o) => [(o.spec.clientGroups || []).join(", "), (o.spec.denyLists || []).join(", "),
      (o.spec.allowLists || []).join(", "), o.status.active === undefined ? "" : String(o.status.active)],
  },
};

export const enabled = (o) => String(((o.metadata.annotations || {})["kudurru.io/enabled"]) ?? "true").trim().toLowerCase() !== "false";

function conditions(o) {
  // Degraded and Disabled are bad news when True; the others when False.
  return h("span", {}, ((o.status && o.status.conditions) || []).map((c) => {
    const good = ["Degraded", "Disabled"].includes(c.type) ? c.status !== "True" : c.status === "True";
    return h("span", { class: `pill ${good ? "ok" : "fail"}`, title: c.message }, `${c.type}: ${c.status}`, " ");
  }));
}

export async function render(main, ctx) {
  const K = KINDS[ctx.kind];
  const base = `/${ctx.kind}`;
  const write = can("objects.write");
  const listBox = h("div", { id: "objects" });
  const editor = h("section", { id: "editor", "aria-label": "Editor" });
  add(main, write ? h("button", { type: "button", id: "create", onclick: () => edit(null) }, `New ${K.kind}`) : null, editor, listBox);

  async function load() {
    const items = (await get(base)).items || [];
    const rows = items.map((o) => {
      const name = o.metadata.name;
      const on = enabled(o);
      const acts = [];
      if (write) {
        acts.push(h("button", { type: "button", class: "secondary", onclick: () => edit(o) }, "Edit"));
        acts.push(h("button", { type: "button", class: "secondary", "data-action": "toggle", "data-name": name, onclick: () => toggle(o, !on) }, on ? "Disable" : "Enable"));
        if (ctx.kind === "blocklists" && can("lists.refresh")) acts.push(h("button", { type: "button", class: "secondary", "data-action": "refresh", "data-name": name, onclick: () => refresh(name) }, "Refresh"));
        acts.push(h("button", { type: "button", class: "danger", onclick: () => remove(name) }, "Delete"));
      }
      const detail = h("details", {}, h("summary", {}, "status"),
        h("pre", { class: "mono" }, JSON.stringify(o.status, null, 1)));
      return [h("span", { class: "mono" }, name), h("span", { class: "pill " + (on ? "enabled" : "disabled") }, on ? "enabled" : "disabled"),
        ...K.cells(o), conditions(o), detail, h("span", { class: "row" }, acts)];
    });
    listBox.replaceChildren(table(K.title, ["name", "state", ...K.columns, "conditions", "status", "actions"], rows));
  }

  async function toggle(o, on) {
    try {
      await api("PATCH", `${base}/${o.metadata.name}`, { metadata: { annotations: { "kudurru.io/enabled": on ? null : "false" } } });
      say(`${o.metadata.name} ${on ? "enabled" : "disabled"}.`, "ok");
      await load();
    } catch (e) { say(errorText(e), "error"); }
  }

  async function refresh(name) {
    try {
      const r = await api("POST", `${base}/${name}/refresh`, {});
      say(`Refresh of ${name}: ${r.status} ${r.body && r.body.refresh ? r.body.refresh : ""} (the result shows in its status).`, "ok");
      setTimeout(() => ctx.alive() && load().catch(() => {}), 1500);
    } catch (e) {
      const why = e instanceof ApiError ? { 409: "refused: the list is disabled or a refresh runs", 404: "no such list", 503: "this node cannot refresh now (not the leader or not ready)" }[e.status] : null;
      say(`Refresh of ${name}: ${why || ""} (${errorText(e)})`, "error");
    }
  }

  async function remove(name) {
    if (!window.confirm(`Delete ${K.kind} ${name}?`)) return;
    try { await api("DELETE", `${base}/${name}`); say(`${name} deleted.`, "ok"); await load(); } catch (e) { say(errorText(e), "error"); }
  }

  function edit(o) {
    const values = o ? K.toForm(o.spec) : K.toForm({});
    const inputs = {};
    const form = h("form", { class: "card", id: "object-form" });
    const nameIn = h("input", { name: "name", "data-key": "metadata.name", required: true, value: o ? o.metadata.name : "", readonly: !!o });
    form.append(h("h2", {}, o ? `Edit ${o.metadata.name}` : `New ${K.kind}`), field("Name", nameIn, o ? null : "Lowercase letters, digits and '-'."));
    for (const [key, label, type, hint] of K.fields) {
      let el;
      if (Array.isArray(type)) el = h("select", { name: key, "data-key": key }, type.map((x) => h("option", { value: x, selected: values[key] === x }, x)));
      else if (type === "textarea") { el = h("textarea", { name: key, "data-key": key, rows: 4 }); el.value = values[key] || ""; }
      else el = h("input", { name: key, "data-key": key, value: values[key] || "" });
      inputs[key] = el;
      form.append(field(label, el, hint));
    }
    form.append(h("div", { class: "row" }, h("button", { type: "submit" }, "Save"),
      h("button", { type: "button", class: "secondary", onclick: () => editor.replaceChildren() }, "Cancel")));
    form.addEventListener("submit", async (ev) => {
      ev.preventDefault();
      const f = {};
      for (const [k, el] of Object.entries(inputs)) f[k] = el.value;
      const spec = K.toSpec(f);
      try {
        if (o) {
          await api("PATCH", `${base}/${o.metadata.name}`, { metadata: { resourceVersion: o.metadata.resourceVersion }, spec });
        } else {
          for (const k of Object.keys(spec)) if (spec[k] === null) delete spec[k];
          await api("POST", base, { kind: K.kind, metadata: { name: nameIn.value.trim() }, spec });
        }
        editor.replaceChildren();
        say(`${o ? o.metadata.name : nameIn.value.trim()} saved.`, "ok");
        await load();
      } catch (e) {
        // spec.sources[2] of a list may be an inline one: point at the inline field then.
        if (e instanceof ApiError && e.body.key && /^spec\.sources\[\d+\]\.inline/.test(e.body.key)) e.body.key = "spec.inline";
        showFieldError(form, e);
      }
    });
    editor.replaceChildren(form);
    (o ? form.querySelector("[data-key^=spec]") : nameIn).focus();
  }

  await load();
}
