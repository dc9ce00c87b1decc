import Crypto

/// The console's stylesheet and script, served from the binary under
/// `/console/assets/` by a name that holds a hash of their bytes
/// (`console-1a2b3c4d5e6f.css`): a browser may keep them for a year, and a
/// new hallpass-server names new bytes anew. Nothing is fetched from
/// anywhere else; the pages' Content-Security-Policy allows only these.
struct ConsoleAssets: Sendable {
    struct Asset: Sendable {
        let name: String
        let contentType: String
        let bytes: [UInt8]
    }

    let stylesheet: Asset
    let script: Asset

    static let shared = ConsoleAssets()

    init() {
        stylesheet = Self.asset("console", "css", "text/css; charset=utf-8", Self.css)
        script = Self.asset("console", "js", "text/javascript; charset=utf-8", Self.javascript)
    }

    private static func asset(_ stem: String, _ suffix: String, _ contentType: String, _ text: String) -> Asset {
        let bytes = Array(text.utf8)
        let hash = Secrets.sha256(bytes).prefix(12)
        return Asset(name: "\(stem)-\(hash).\(suffix)", contentType: contentType, bytes: bytes)
    }

    func asset(named name: String) -> Asset? {
        [stylesheet, script].first { $0.name == name }
    }

    static let path = "/console/assets/"

    /// System fonts (Korean ones named), light and dark, a visible focus ring
    /// on everything that takes focus, and colours of at least 4.5:1 against
    /// their background (WCAG AA) in both schemes.
    static let css = """
        :root{color-scheme:light dark;--bg:#f3f4f6;--fg:#16181b;--muted:#474b53;--card:#fff;--line:#c5c8ce;--link:#0b4fb8;
        --accent:#0b57d0;--on-accent:#fff;--bad:#a11a1a;--bad-bg:#fdecec;--ok:#14632d;--warn:#7a4b00;--focus:#b45309}
        @media (prefers-color-scheme:dark){:root{--bg:#111214;--fg:#e6e7ea;--muted:#b8bcc4;--card:#1c1e22;--line:#3d4148;--link:#9dc1ff;
        --accent:#a8c7fa;--on-accent:#0b1d3a;--bad:#ffb4ab;--bad-bg:#3b1212;--ok:#7fdc98;--warn:#f5c46b;--focus:#fbbf24}}
        *{box-sizing:border-box}
        body{margin:0;background:var(--bg);color:var(--fg);line-height:1.5;font-size:1rem;
        font-family:system-ui,-apple-system,"Segoe UI",Roboto,"Noto Sans","Noto Sans KR","Apple SD Gothic Neo","Malgun Gothic",sans-serif}
        a{color:var(--link)}
        :focus-visible{outline:3px solid var(--focus);outline-offset:2px}
        .skip{position:absolute;left:-9999px;top:0;padding:.5rem 1rem;background:var(--card);color:var(--fg)}
        .skip:focus{left:.5rem;top:.5rem;z-index:10}
        .visually-hidden{position:absolute;width:1px;height:1px;overflow:hidden;clip:rect(0 0 0 0);white-space:nowrap}
        header.top{display:flex;flex-wrap:wrap;align-items:center;gap:.5rem 1.5rem;padding:.75rem 1.5rem;background:var(--card);border-bottom:1px solid var(--line)}
        .school{margin:0;font-weight:700;font-size:1.1rem}
        .menu ul{display:flex;flex-wrap:wrap;gap:.25rem 1rem;margin:0;padding:0;list-style:none}
        .menu a{text-decoration:none;padding:.25rem 0}
        .menu a[aria-current=page]{font-weight:700;text-decoration:underline;text-underline-offset:.3rem}
        .who{margin-inline-start:auto;display:flex;gap:.75rem;align-items:center;color:var(--muted)}
        main{max-width:90rem;margin:0 auto;padding:1rem 1.5rem 3rem}
        h1{font-size:1.6rem;margin:.5rem 0 1rem}
        h2{font-size:1.25rem;margin:1.5rem 0 .5rem}
        h3{font-size:1.05rem;margin:1.25rem 0 .5rem}
        footer{padding:1rem 1.5rem;border-top:1px solid var(--line);color:var(--muted)}
        .note{color:var(--muted);font-size:.95rem}
        .flash{padding:.5rem .75rem;border-inline-start:4px solid var(--ok);background:var(--card)}
        .error{padding:.5rem .75rem;border-inline-start:4px solid var(--bad);background:var(--bad-bg);color:var(--fg)}
        .cards{display:grid;grid-template-columns:repeat(auto-fit,minmax(18rem,1fr));gap:1rem}
        .card{background:var(--card);border:1px solid var(--line);border-radius:8px;padding:0 1rem 1rem}
        table{border-collapse:collapse;width:100%;background:var(--card)}
        th,td{text-align:start;vertical-align:top;padding:.35rem .6rem;border-bottom:1px solid var(--line)}
        thead th{border-bottom:2px solid var(--fg)}
        .number{text-align:end;font-variant-numeric:tabular-nums}
        .nowrap{white-space:nowrap}
        .wrap{overflow-wrap:anywhere}
        .url{color:var(--muted);font-size:.9rem}
        .scroll{overflow-x:auto}
        .state,.action{font-weight:600}
        .state-ok{color:var(--ok)}.state-stale,.state-behind{color:var(--warn)}.state-unfiltered,.state-revoked,.action-block{color:var(--bad)}
        form.filters{display:flex;flex-wrap:wrap;gap:.75rem 1rem;align-items:flex-end;margin-bottom:1rem}
        form.filters div{display:flex;flex-direction:column}
        fieldset{border:1px solid var(--line);border-radius:6px;display:flex;flex-wrap:wrap;gap:.5rem 1rem;align-items:flex-end}
        fieldset .note{flex-basis:100%;margin:0}
        form.stack{display:flex;flex-direction:column;gap:.35rem;max-width:60rem}
        form.narrow{max-width:24rem}
        form.inline{display:inline}
        form.row-form{display:grid;grid-template-columns:max-content 1fr;gap:.25rem .5rem;align-items:center}
        input,select,textarea{font:inherit;color:inherit;background:var(--card);border:1px solid var(--muted);border-radius:6px;padding:.35rem .5rem}
        textarea.code,.code{font-family:ui-monospace,"SFMono-Regular",Menlo,Consolas,"Noto Sans Mono",monospace;font-size:.9rem}
        textarea.code{width:100%}
        pre.code{background:var(--card);border:1px solid var(--line);padding:.75rem;overflow-x:auto}
        .diff .add{color:var(--ok)}.diff .remove{color:var(--bad)}.diff .hunk{color:var(--muted)}
        button{font:inherit;font-weight:600;padding:.45rem 1rem;border-radius:6px;border:1px solid var(--accent);background:var(--accent);color:var(--on-accent);cursor:pointer;align-self:flex-start}
        button.secondary{background:transparent;color:var(--link)}
        a.button{display:inline-block;font-weight:600;padding:.45rem 1rem;border-radius:6px;border:1px solid var(--accent);text-decoration:none}
        a.button.secondary{background:transparent;color:var(--link)}
        button.link{background:none;border:0;padding:0;color:var(--link);text-decoration:underline;font-weight:400}
        button.danger{background:var(--bad);border-color:var(--bad);color:var(--card)}
        dl.pairs{display:grid;grid-template-columns:max-content 1fr;gap:.3rem 1rem}
        dl.pairs dt{font-weight:600}dl.pairs dd{margin:0}
        .pages{display:flex;gap:1rem;margin-top:1rem}
        form.language{display:flex;gap:.5rem;align-items:center}
        ul.requests{list-style:none;margin:0;padding:0;display:grid;grid-template-columns:repeat(auto-fit,minmax(24rem,1fr));gap:1rem}
        ul.requests form{margin-top:.75rem}
        @media (max-width:40rem){main{padding:1rem}header.top{padding:.75rem 1rem}.who{margin-inline-start:0}}
        """

    /// Two helps; every page works the same without them. A form with
    /// `data-confirm` asks first (revoking a machine). Nothing sends a form
    /// on its own when a field changes: a keyboard user moving through a
    /// menu would be taken away from the page (WCAG 3.2.2). A table with
    /// `data-live` (a room's page) has its rows made again every 2 seconds
    /// from the JSON at that path, as text, never as HTML; while the tab is
    /// hidden it does not ask. A list with `data-requests` (the access
    /// requests waiting) asks its JSON every 2 seconds too: a request that
    /// arrives is added from the page's `<template>` (its text set as text,
    /// its menu of scopes cut to the request's own), one answered elsewhere
    /// is taken away; the others are left as they are, with what is typed.
    static let javascript = """
        "use strict";
        document.addEventListener("submit", function (event) {
          var question = event.target.getAttribute("data-confirm");
          if (question && !window.confirm(question)) event.preventDefault();
        });
        (function () {
          var table = document.querySelector("table[data-live]");
          if (!table || !window.fetch) return;
          var body = table.tBodies[0];
          function cell(row, tag, text, className) {
            var element = document.createElement(tag);
            if (tag === "th") element.scope = "row";
            if (className) {
              var span = document.createElement("span");
              span.className = className;
              span.textContent = text;
              element.appendChild(span);
            } else {
              element.textContent = text;
            }
            row.appendChild(element);
          }
          function show(answer) {
            var rows = document.createDocumentFragment();
            (answer.machines || []).forEach(function (machine) {
              var row = document.createElement("tr");
              row.id = "machine-" + machine.id;
              cell(row, "th", machine.hostname);
              cell(row, "td", machine.stateLabel, "state state-" + machine.state);
              cell(row, "td", machine.users);
              cell(row, "td", machine.blocked);
              rows.appendChild(row);
            });
            while (body.firstChild) body.removeChild(body.firstChild);
            body.appendChild(rows);
          }
          function ask() {
            if (document.hidden) return;
            fetch(table.getAttribute("data-live"), {credentials: "same-origin", headers: {"Accept": "application/json"}})
              .then(function (response) { return response.ok ? response.json() : null; })
              .then(function (answer) { if (answer) show(answer); })
              .catch(function () {});
          }
          window.setInterval(ask, 2000);
        })();
        (function () {
          var list = document.querySelector("ul[data-requests]");
          var template = document.getElementById("request-template");
          if (!list || !template || !window.fetch) return;
          var none = document.getElementById("requests-none");
          var placeholder = "__id__";
          function make(request) {
            var item = template.content.firstElementChild.cloneNode(true);
            [item].concat(Array.prototype.slice.call(item.querySelectorAll("[id],[for],[action],[data-request]"))).forEach(function (element) {
              ["id", "for", "action", "data-request"].forEach(function (name) {
                var value = element.getAttribute(name);
                if (value && value.indexOf(placeholder) >= 0) element.setAttribute(name, value.split(placeholder).join(request.id));
              });
            });
            Array.prototype.forEach.call(item.querySelectorAll("[data-field]"), function (element) {
              var value = request[element.getAttribute("data-field")];
              element.textContent = value === undefined || value === null ? "" : String(value);
            });
            var scope = item.querySelector("select[name=scope]");
            if (scope) {
              Array.prototype.slice.call(scope.options).forEach(function (option) {
                if ((request.scopes || []).indexOf(option.value) < 0) scope.removeChild(option);
              });
              if (scope.options.length) scope.options[0].selected = true;
            }
            return item;
          }
          function show(answer) {
            var wanted = {};
            (answer.requests || []).forEach(function (request) { wanted[request.id] = true; });
            Array.prototype.slice.call(list.querySelectorAll("li[data-request]")).forEach(function (item) {
              if (!wanted[item.getAttribute("data-request")]) list.removeChild(item);
            });
            var next = list.firstElementChild;
            (answer.requests || []).forEach(function (request) {
              var item = document.getElementById("request-" + request.id);
              if (!item) {
                list.insertBefore(make(request), next);
              } else {
                next = item.nextElementSibling;
              }
            });
            if (none) none.hidden = list.children.length > 0;
          }
          function ask() {
            if (document.hidden) return;
            fetch(list.getAttribute("data-requests"), {credentials: "same-origin", headers: {"Accept": "application/json"}})
              .then(function (response) { return response.ok ? response.json() : null; })
              .then(function (answer) { if (answer) show(answer); })
              .catch(function () {});
          }
          // Every second: a student's request is on the teacher's page within 2 s of the form (issue 30).
          window.setInterval(ask, 1000);
        })();
        """
}
