/// The built-in pages. Plain HTML5 with a little inline CSS (system fonts,
/// readable on a phone, light and dark), no scripts, no external resources:
/// the Content-Security-Policy the renderer sends allows nothing else.
/// The ids (`organization`, `blocked-host`, ...) are stable: browser tests
/// and custom templates can rely on them. A page that waits for a request's
/// answer reloads itself with `<meta http-equiv="refresh">`, not a script.
enum BuiltInTemplates {
    static let style = """
        <style>
        :root{color-scheme:light dark}
        body{margin:0;background:#eef0f3;color:#1b1c1e;line-height:1.5;font-size:1rem;
        font-family:system-ui,-apple-system,"Segoe UI",Roboto,"Noto Sans","Noto Sans KR","Apple SD Gothic Neo","Malgun Gothic",sans-serif}
        main{box-sizing:border-box;max-width:40rem;margin:2rem auto;padding:1.5rem;background:#fff;border-radius:12px;box-shadow:0 1px 4px rgba(0,0,0,.15)}
        .organization{margin:0 0 .5rem;font-weight:600;color:#41454d}
        h1{margin:0 0 .75rem;font-size:1.6rem;line-height:1.25;color:#a31515}
        h2{margin:1.5rem 0 .5rem;font-size:1.15rem}
        dl{display:grid;grid-template-columns:max-content 1fr;gap:.4rem 1rem;margin:1.25rem 0}
        dt{font-weight:600}
        dd{margin:0;overflow-wrap:anywhere}
        label{display:block;margin-bottom:.25rem}
        textarea{box-sizing:border-box;width:100%;min-height:6rem;padding:.5rem;font:inherit;color:inherit;background:transparent;border:1px solid #767a82;border-radius:8px}
        .button,button{display:inline-block;margin-top:.75rem;padding:.6rem 1.2rem;font:inherit;font-weight:600;color:#fff;background:#0b57d0;border:0;border-radius:8px;text-decoration:none;cursor:pointer}
        .help{color:#41454d}
        @media (max-width:32rem){main{margin:0;border-radius:0;box-shadow:none}dl{grid-template-columns:1fr;gap:0}dd{margin-bottom:.5rem}}
        @media (prefers-color-scheme:dark){body{background:#111214;color:#e6e7ea}main{background:#1c1e22}
        .organization,.help{color:#b8bcc4}h1{color:#ff8a80}.button,button{background:#a8c7fa;color:#0b1d3a}}
        </style>
        """

    static let head = """
        <meta charset="utf-8">
        <meta name="viewport" content="width=device-width, initial-scale=1">
        <meta name="robots" content="noindex">
        {{#refresh}}
        <meta http-equiv="refresh" content="{{refresh}}">
        {{/refresh}}
        """

    static let block = """
        <!doctype html>
        <html lang="{{lang}}" dir="{{t.direction}}">
        <head>
        \(head)
        <title>{{t.title}} · {{organization}}</title>
        \(style)
        </head>
        <body>
        <main>
        <p class="organization" id="organization">{{organization}}</p>
        <h1>{{t.heading}}</h1>
        <p>{{t.explanation}}</p>
        <dl>
        <dt>{{t.hostLabel}}</dt>
        <dd id="blocked-host">{{host}}</dd>
        <dt>{{t.urlLabel}}</dt>
        <dd id="blocked-url">{{url}}</dd>
        {{#category}}
        <dt>{{t.categoryLabel}}</dt>
        <dd id="blocked-category">{{category}}</dd>
        {{/category}}
        {{#rule}}
        <dt>{{t.ruleLabel}}</dt>
        <dd id="blocked-rule">{{rule}}</dd>
        {{/rule}}
        {{#reason}}
        <dt>{{t.reasonLabel}}</dt>
        <dd id="blocked-reason">{{reason}}</dd>
        {{/reason}}
        </dl>
        {{#accessRequest}}
        <section id="request-state">
        {{#accessRequest.pending}}
        <h2>{{t.pendingHeading}}</h2>
        <p id="request-pending">{{t.pendingText}}</p>
        {{/accessRequest.pending}}
        {{#accessRequest.approved}}
        <h2>{{t.approvedHeading}}</h2>
        <p id="request-approved">{{t.approvedText}}</p>
        {{#accessRequest.url}}
        <p><a class="button" id="request-open" href="{{accessRequest.url}}" rel="noreferrer">{{t.approvedOpen}}</a></p>
        {{/accessRequest.url}}
        {{/accessRequest.approved}}
        {{#accessRequest.denied}}
        <h2>{{t.deniedHeading}}</h2>
        <p id="request-denied">{{t.deniedText}}</p>
        {{/accessRequest.denied}}
        {{#accessRequest.message}}
        <p>{{t.messageLabel}}: <span id="request-message">{{accessRequest.message}}</span></p>
        {{/accessRequest.message}}
        </section>
        {{/accessRequest}}
        {{#link}}
        <p><a class="button" id="request-access" href="{{link.url}}" rel="noreferrer noopener">{{link.text}}</a></p>
        {{/link}}
        {{#form}}
        <form method="post" action="{{form.action}}" id="request-access-form">
        <h2>{{form.text}}</h2>
        <input type="hidden" name="host" value="{{form.host}}">
        <input type="hidden" name="url" value="{{form.url}}">
        {{#form.category}}
        <input type="hidden" name="category" value="{{form.category}}">
        {{/form.category}}
        <input type="hidden" name="token" value="{{form.token}}">
        <label for="reason">{{t.formReasonLabel}}</label>
        <textarea id="reason" name="reason" required minlength="1" maxlength="{{form.reasonMaxLength}}" rows="4"></textarea>
        <button type="submit">{{t.formSubmit}}</button>
        </form>
        {{/form}}
        <p class="help">{{t.help}}</p>
        {{#inspected}}
        <p class="help" id="inspection-notice">{{t.inspectedNotice}}</p>
        {{/inspected}}
        </main>
        </body>
        </html>

        """

    static let received = """
        <!doctype html>
        <html lang="{{lang}}" dir="{{t.direction}}">
        <head>
        \(head)
        <title>{{t.receivedTitle}} · {{organization}}</title>
        \(style)
        </head>
        <body>
        <main>
        <p class="organization" id="organization">{{organization}}</p>
        <h1>{{t.receivedHeading}}</h1>
        <p>{{t.receivedText}}</p>
        <dl>
        <dt>{{t.requestIdLabel}}</dt>
        <dd id="request-id">{{requestId}}</dd>
        <dt>{{t.hostLabel}}</dt>
        <dd id="blocked-host">{{host}}</dd>
        </dl>
        </main>
        </body>
        </html>

        """

    static let error = """
        <!doctype html>
        <html lang="{{lang}}" dir="{{t.direction}}">
        <head>
        \(head)
        <title>{{t.errorTitle}} {{status}} · {{organization}}</title>
        \(style)
        </head>
        <body>
        <main>
        <p class="organization" id="organization">{{organization}}</p>
        <h1>{{message}}</h1>
        <p>{{t.errorCodeLabel}}: <span id="error-status">{{status}}</span></p>
        </main>
        </body>
        </html>

        """
}
