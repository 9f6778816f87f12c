// ragline web view: live document status over SSE, uploads, retry/reprocess/delete.
// No framework, no build step, nothing from a CDN.
"use strict";

function say(text, isError) {
  const el = document.getElementById("message");
  if (!el) return;
  el.textContent = text;
  el.className = isError ? "error" : "";
}

async function problemText(response) {
  try {
    const body = await response.json();
    return body.detail || body.title || response.statusText;
  } catch (e) {
    return response.status + " " + response.statusText;
  }
}

function cell(row, cls, value) {
  const td = row.querySelector("td." + cls);
  if (td) td.textContent = value == null ? "" : value;
}

function newRow(ev) {
  const row = document.createElement("tr");
  row.id = "doc-" + ev.document_id;
  row.dataset.id = ev.document_id;
  const link = document.createElement("a");
  link.href = "/documents/" + ev.document_id;
  link.textContent = ev.filename;
  const first = document.createElement("td");
  first.appendChild(link);
  row.appendChild(first);
  for (const cls of ["status", "stage", "error", "when"]) {
    const td = document.createElement("td");
    td.className = cls;
    row.appendChild(td);
  }
  return row;
}

function matches(table, ev) {
  const status = table.dataset.status, stage = table.dataset.stage;
  return (!status || status === ev.status) && (!stage || stage === ev.stage);
}

function onListEvent(table, ev) {
  const body = table.tBodies[0];
  let row = document.getElementById("doc-" + ev.document_id);
  if (ev.status === "deleted" || !matches(table, ev)) {
    if (row) row.remove();
    return;
  }
  if (!row) {
    row = newRow(ev);
    body.insertBefore(row, body.firstChild);
  }
  row.className = "status-" + ev.status;
  cell(row, "status", ev.status);
  cell(row, "stage", ev.stage);
  cell(row, "error", ev.error);
  cell(row, "when", new Date().toISOString().replace("T", " ").slice(0, 19));
}

function onDocumentEvent(section, ev) {
  if (ev.document_id !== section.dataset.id) return;
  if (ev.status === "deleted") {
    say("this document was deleted");
    return;
  }
  const status = document.getElementById("doc-status");
  status.textContent = ev.status;
  status.className = "status-" + ev.status;
  document.getElementById("doc-stage").textContent = ev.stage || "";
  document.getElementById("doc-error").textContent = ev.error || "";
}

function listen() {
  const table = document.getElementById("documents");
  const section = document.getElementById("document");
  if (!table && !section) return;
  window.raglineEvents = [];
  const source = new EventSource("/v1/events");
  source.onopen = () => { document.body.dataset.live = "open"; };
  source.addEventListener("document", (msg) => {
    const ev = JSON.parse(msg.data);
    window.raglineEvents.push(ev);  // what arrived, for whoever looks (tests do)
    if (table) onListEvent(table, ev);
    if (section) onDocumentEvent(section, ev);
  });
  source.addEventListener("reset", () => window.location.reload());
}

// Every write carries the page's CSRF token (the server refuses a browser's write without it).
function csrfHeaders() {
  const meta = document.querySelector('meta[name="csrf-token"]');
  return { "X-CSRF-Token": meta ? meta.content : "" };
}

async function upload(form) {
  const files = document.getElementById("upload-file").files;
  if (!files.length) {
    say("choose a document first", true);
    return;
  }
  for (const file of files) {
    const data = new FormData();
    data.append("file", file, file.name);
    const response = await fetch("/v1/documents", {
      method: "POST", body: data, headers: csrfHeaders() });
    if (!response.ok) {
      say(file.name + ": " + (await problemText(response)), true);
      return;
    }
    const body = await response.json();
    say((body.created ? "uploaded " : "already there: ") + file.name);
  }
  form.reset();
}

async function act(method, url, payload, done) {
  const init = { method: method, headers: csrfHeaders() };
  if (payload) {
    init.headers["Content-Type"] = "application/json";
    init.body = JSON.stringify(payload);
  }
  const response = await fetch(url, init);
  if (!response.ok) {
    say(await problemText(response), true);
    return;
  }
  done();
}

function wireButtons() {
  const form = document.getElementById("upload-form");
  if (form) form.addEventListener("submit", (e) => { e.preventDefault(); upload(form); });
  const retry = document.getElementById("retry");
  if (retry) retry.addEventListener("click", () =>
    act("POST", "/v1/documents/" + retry.dataset.id + "/retry", null, () => say("requeued")));
  const reprocess = document.getElementById("reprocess");
  if (reprocess) reprocess.addEventListener("click", () => {
    const from = document.getElementById("reprocess-from").value;
    act("POST", "/v1/reprocess", { from: from, ids: [reprocess.dataset.id] },
      () => say("reprocessing from " + from));
  });
  const del = document.getElementById("delete");
  if (del) del.addEventListener("click", () => {
    if (!window.confirm("Delete this document, its files and its points?")) return;
    act("DELETE", "/v1/documents/" + del.dataset.id, null, () => { window.location = "/"; });
  });
}

document.addEventListener("DOMContentLoaded", () => { wireButtons(); listen(); });
