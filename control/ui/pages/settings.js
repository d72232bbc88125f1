// Settings: the effective cluster-scope values with the layer each comes from and a mark on
// the restart-bound ones; edit → dry-run diff → confirm → apply; the history of applied
// versions with rollback (itself dry-run first). Node-scope values are shown read-only.
import { h, put, api, get, can, table, say, errorText, fmtTime, showFieldError, ApiError } from "../app.js";

// {a: {b: 1}} → [["a.b", 1]]; arrays and scalars are leaves.
function flatten(obj, prefix, out) {
  for (const [k, v] of Object.entries(obj || {})) {
    const key = prefix ? `${prefix}.${k}` : k;
    if (v && typeof v === "object" && !Array.isArray(v)) flatten(v, key, out);
    else out.push([key, v]);
  }
  return out;
}
const show = (v) => (v === undefined ? "" : typeof v === "string" ? v : JSON.stringify(v));
// The input's text as JSON when it parses (numbers, booleans, arrays), else a string.
function parse(text, old) {
  if (typeof old === "string") return text;
  try { return JSON.parse(text); } catch { return text; }
}

function diffTable(changes) {
  return h("div", { class: "diff" }, table("Changes", ["key", "old", "new", "source of the old value", "restart"],
    (changes || []).map((c) => [h("span", { class: "mono" }, c.key), show(c.old), show(c.new), c.source || "", c.restartRequired ? "restart required" : "hot"])));
}

export async function render(main) {
  const write = can("settings.write");
  const s = await get("/settings");
  const restart = new Set(s.restartRequired || []);
  const inputs = new Map();
  const form = h("form", { id: "settings-form" });
  const rows = flatten(s.values, "", []).map(([key, value]) => {
    let cell = h("span", { class: "mono" }, show(value));
    if (write) {
      const el = h("input", { "data-key": key, "aria-label": key, value: show(value), size: 18 });
      inputs.set(key, { el, value });
      cell = el;
    }
    return [h("span", { class: "mono" }, key), cell, s.sources[key] || "", restart.has(key) ? "restart" : "hot"];
  });
  const review = h("section", { id: "review", "aria-live": "polite", "aria-label": "Review" });
  form.append(h("p", {}, s.settingsFile ? `Settings file: ${s.settingsFile}` : "No settings file: changes stay in memory until restart."),
    table("Cluster settings", ["key", "value", "source", "applies"], rows));
  if (write) form.append(h("div", { class: "row" }, h("button", { type: "submit", id: "review-btn" }, "Review changes")));
  main.append(form, review);

  const patchBody = () => {
    const body = {};
    for (const [key, { el, value }] of inputs) if (el.value !== show(value)) body[key] = parse(el.value, value);
    return body;
  };

  form.addEventListener("submit", async (ev) => {
    ev.preventDefault();
    const body = patchBody();
    if (!Object.keys(body).length) { say("Nothing changed."); return; }
    try {
      const r = await api("PATCH", "/settings?dryRun=true", body);
      const confirm = h("button", { type: "button", id: "apply" }, "Apply");
      put(review, h("h2", { tabindex: "-1" }, "Dry run: nothing is applied yet"), diffTable(r.body.changes),
        r.body.restartRequired ? h("p", { class: "warn" }, "Some changes take effect at the next restart.") : null,
        h("div", { class: "row" }, confirm, h("button", { type: "button", class: "secondary", onclick: () => review.replaceChildren() }, "Cancel")));
      review.querySelector("h2").focus();
      confirm.addEventListener("click", async () => {
        try {
          const a = await api("PATCH", "/settings", body);
          say(`Applied: ${(a.body.changes || []).map((c) => c.key).join(", ") || (a.body.changed || []).join(", ")}${a.body.persisted === false ? " (not persisted: no settings file)" : ""}.`, "ok");
          main.replaceChildren(h("h1", { tabindex: "-1" }, "Settings"));
          await render(main);
        } catch (e) { review.append(h("p", { class: "error", role: "alert" }, errorText(e))); }
      });
    } catch (e) {
      showFieldError(form, e);
    }
  });

  // History and rollback.
  const hist = h("section", { id: "history" });
  main.append(hist);
  try {
    const versions = (await get("/settings/history")).versions || [];
    hist.replaceChildren(h("h2", {}, "History"), table(null, ["version", "time", "actor", "changes", "rollback"], versions.map((v) => [String(v.version), fmtTime(v.time), v.actor || "",
      (v.changes || []).map((c) => `${c.key}: ${show(c.old)} → ${show(c.new)}`).join("; "),
      write ? h("button", { type: "button", class: "secondary", "data-version": v.version, onclick: () => rollback(v.version) }, "Roll back to this") : ""])));
  } catch (e) {
    hist.replaceChildren(h("h2", {}, "History"), h("p", {}, e instanceof ApiError && e.status === 404 ? "This node has no settings history API." : errorText(e)));
  }

  async function rollback(version) {
    try {
      const r = await api("POST", "/settings/rollback?dryRun=true", { version });
      const go = h("button", { type: "button", id: "apply-rollback" }, `Roll back to version ${version}`);
      review.replaceChildren(h("h2", { tabindex: "-1" }, `Dry run of the rollback to version ${version}`), diffTable(r.body.changes),
        h("div", { class: "row" }, go, h("button", { type: "button", class: "secondary", onclick: () => review.replaceChildren() }, "Cancel")));
      review.querySelector("h2").focus();
      go.addEventListener("click", async () => {
        try {
          await api("POST", "/settings/rollback", { version });
          say(`Rolled back to version ${version}.`, "ok");
          main.replaceChildren(h("h1", { tabindex: "-1" }, "Settings"));
          await render(main);
        } catch (e) { review.append(h("p", { class: "error", role: "alert" }, errorText(e))); }
      });
    } catch (e) { say(errorText(e), "error"); }
  }

  const node = await get("/node/config");
  const nrestart = new Set(node.restartRequired || []);
  main.append(h("h2", {}, "Node configuration"),
    table(null, ["key", "value", "source", "applies"], flatten(node.values, "", []).map(([k, v]) => [h("span", { class: "mono" }, k), h("span", { class: "mono" }, show(v)), node.sources[k] || "", nrestart.has(k) ? "restart" : "hot"])));
}
