import Mustache

/// The console's pages as Mustache templates, compiled into the binary. A
/// school translates the strings (ConsoleStrings), not the templates.
///
/// Every value is written `{{name}}`, which the engine escapes for HTML
/// (`<`, `>`, `&`, `"`, `'`), safe in text and in a quoted attribute; no
/// template writes `{{{name}}}` or `{{&name}}` (a test checks), and no HTML
/// is ever made by joining strings in Swift. Each page fills the layout's
/// `content` block (`{{<layout}}`), and reads its own values under `page`,
/// the layout's under `layout`, the strings under `t`.
enum ConsoleTemplates {
    static let layout = """
        <!doctype html>
        <html lang="{{lang}}" dir="{{t.direction}}">
        <head>
        <meta charset="utf-8">
        <meta name="viewport" content="width=device-width, initial-scale=1">
        <meta name="robots" content="noindex">
        <title>{{title}} · {{layout.schoolName}}</title>
        <link rel="stylesheet" href="{{layout.stylesheet}}">
        <script src="{{layout.script}}" defer></script>
        </head>
        <body>
        <a class="skip" href="#main">{{t.skipToContent}}</a>
        <header class="top">
        <p class="school" id="school-name">{{layout.schoolName}}</p>
        {{#layout.signedIn}}
        <nav class="menu" aria-label="{{t.navLabel}}">
        <ul>
        {{#layout.nav}}
        <li><a id="nav-{{id}}" href="{{href}}"{{#current}} aria-current="page"{{/current}}>{{label}}</a></li>
        {{/layout.nav}}
        </ul>
        </nav>
        <div class="who">
        <span>{{t.signedInAs}} <strong id="signed-in-as">{{layout.person}}</strong> ({{layout.roleLabel}})</span>
        <form method="post" action="/console/sign-out" class="inline">
        <input type="hidden" name="csrf" value="{{layout.csrf}}">
        <button type="submit" class="link">{{t.signOut}}</button>
        </form>
        <form method="post" action="/console/sign-out-everywhere" class="inline">
        <input type="hidden" name="csrf" value="{{layout.csrf}}">
        <button type="submit" class="link" id="sign-out-everywhere">{{t.signOutEverywhere}}</button>
        </form>
        </div>
        {{/layout.signedIn}}
        </header>
        <main id="main" tabindex="-1">
        <h1>{{title}}</h1>
        {{#layout.flash}}
        <p class="flash" role="status" id="flash">{{layout.flash}}</p>
        {{/layout.flash}}
        {{$content}}{{/content}}
        </main>
        <footer>
        <form method="get" action="/console/language" class="language">
        <input type="hidden" name="next" value="{{layout.path}}">
        <label for="language">{{t.language}}</label>
        <select id="language" name="lang">
        {{#layout.languages}}
        <option value="{{code}}"{{#selected}} selected{{/selected}}>{{name}}</option>
        {{/layout.languages}}
        </select>
        <button type="submit" class="secondary">{{t.languageApply}}</button>
        </form>
        </footer>
        </body>
        </html>
        """

    static let signIn = """
        {{<layout}}{{$content}}{{#page}}
        {{#error}}
        <p class="error" role="alert" id="sign-in-error">{{t.signInError}}</p>
        {{/error}}
        {{#openIDError}}
        <p class="error" role="alert" id="sign-in-error">{{t.signInOpenIDError}}</p>
        {{/openIDError}}
        {{#local}}
        <form method="post" action="/console/sign-in" class="stack narrow" id="sign-in-form">
        {{#layout.csrf}}
        <input type="hidden" name="csrf" value="{{layout.csrf}}">
        {{/layout.csrf}}
        <input type="hidden" name="next" value="{{next}}">
        <label for="login">{{t.login}}</label>
        <input id="login" name="login" autocomplete="username" required maxlength="64" autofocus>
        <label for="password">{{t.password}}</label>
        <input id="password" name="password" type="password" autocomplete="current-password" required>
        <button type="submit">{{t.signIn}}</button>
        </form>
        {{/local}}
        {{#openID}}
        <p class="stack narrow"><a class="button secondary" id="sign-in-oidc" href="{{openIDStart}}">{{t.signInSchoolAccount}}</a></p>
        {{/openID}}
        {{/page}}{{/content}}{{/layout}}
        """

    static let dashboard = """
        {{<layout}}{{$content}}{{#page}}
        {{#scopeText}}
        <p class="note" id="scope">{{scopeText}}</p>
        {{/scopeText}}
        <div class="cards">
        {{#dangerAlerts}}
        <section aria-labelledby="danger-heading" class="card">
        <h2 id="danger-heading">{{t.dashboardAlerts}}</h2>
        <p id="new-danger-alerts"><a href="{{href}}">{{#none}}{{t.dashboardNoNewDanger}}{{/none}}{{^none}}<strong class="state state-unfiltered">{{count}}</strong> {{text}}{{/none}}</a></p>
        </section>
        {{/dangerAlerts}}
        <section aria-labelledby="machines-heading" class="card">
        <h2 id="machines-heading">{{t.dashboardMachines}}</h2>
        {{#hasMachines}}
        <table id="machine-states">
        <thead><tr><th scope="col">{{t.machineState}}</th><th scope="col" class="number">{{t.machinesCount}}</th></tr></thead>
        <tbody>
        {{#machineStates}}
        <tr><th scope="row">{{#href}}<a href="{{href}}">{{/href}}<span class="state state-{{state}}">{{label}}</span>{{#href}}</a>{{/href}}</th><td class="number">{{count}}</td></tr>
        {{/machineStates}}
        </tbody>
        </table>
        {{/hasMachines}}
        {{^hasMachines}}
        <p>{{t.noMachines}}</p>
        {{/hasMachines}}
        </section>
        <section aria-labelledby="blocks-heading" class="card">
        <h2 id="blocks-heading">{{t.dashboardBlocks}}</h2>
        <p class="note">{{windowText}}</p>
        {{#hasBlocks}}
        <table id="blocks-by-category">
        <thead><tr><th scope="col">{{t.category}}</th><th scope="col" class="number">{{t.blocks}}</th></tr></thead>
        <tbody>
        {{#blocksByCategory}}
        <tr><th scope="row">{{#href}}<a href="{{href}}">{{/href}}{{label}}{{#href}}</a>{{/href}}</th><td class="number">{{count}}</td></tr>
        {{/blocksByCategory}}
        </tbody>
        </table>
        {{/hasBlocks}}
        {{^hasBlocks}}
        <p>{{t.noBlocks}}</p>
        {{/hasBlocks}}
        </section>
        <section aria-labelledby="top-heading" class="card">
        <h2 id="top-heading">{{t.dashboardTopBlocked}}</h2>
        <p class="note">{{windowText}}</p>
        {{#hasBlocks}}
        <table id="top-blocked">
        <thead><tr><th scope="col">{{t.host}}</th><th scope="col" class="number">{{t.blocks}}</th></tr></thead>
        <tbody>
        {{#topBlocked}}
        <tr><th scope="row" class="wrap">{{label}}</th><td class="number">{{count}}</td></tr>
        {{/topBlocked}}
        </tbody>
        </table>
        {{/hasBlocks}}
        {{^hasBlocks}}
        <p>{{t.noBlocks}}</p>
        {{/hasBlocks}}
        </section>
        </div>
        <section aria-labelledby="requests-heading" id="requests">
        <h2 id="requests-heading">{{t.dashboardRequests}}</h2>
        \(requestsPanel)
        {{^requests}}<p id="requests-unavailable">{{t.requestsNotAnswered}}</p>{{/requests}}
        </section>
        {{/page}}{{/content}}{{/layout}}
        """

    /// One access request waiting, with its approve and deny forms (ids for
    /// the tests: `request-ID`, `approve-ID`, `deny-ID`); also the
    /// `<template>` the script copies for a request that arrives.
    static let requestItem = """
        <li id="request-{{id}}" class="request card" data-request="{{id}}">
        <h3><span data-field="user">{{user}}</span>: <span class="wrap" data-field="host">{{host}}</span></h3>
        <dl class="pairs">
        <dt>{{t.group}}</dt><dd data-field="group">{{group}}</dd>
        <dt>{{t.room}}</dt><dd data-field="room">{{room}}</dd>
        <dt>{{t.hostname}}</dt><dd data-field="machine">{{machine}}</dd>
        <dt>{{t.category}}</dt><dd data-field="category">{{category}}</dd>
        <dt>{{t.requestsURL}}</dt><dd class="wrap url" data-field="url">{{url}}</dd>
        <dt>{{t.requestsAsked}}</dt><dd data-field="created">{{created}}</dd>
        <dt>{{t.reason}}</dt><dd class="wrap" data-field="reason">{{reason}}</dd>
        </dl>
        {{#canApprove}}
        <form method="post" action="{{approvePath}}" class="row-form" id="approve-{{id}}">
        <input type="hidden" name="csrf" value="{{layout.csrf}}">
        <input type="hidden" name="back" value="{{back}}">
        <label for="approve-scope-{{id}}">{{t.requestsScope}}</label>
        <select id="approve-scope-{{id}}" name="scope">
        {{#scopeOptions}}<option value="{{value}}"{{#selected}} selected{{/selected}}>{{label}}</option>{{/scopeOptions}}
        </select>
        <label for="approve-minutes-{{id}}">{{t.roomDuration}}</label>
        <select id="approve-minutes-{{id}}" name="minutes">
        {{#durations}}<option value="{{value}}"{{#selected}} selected{{/selected}}>{{label}}</option>{{/durations}}
        </select>
        <label for="approve-message-{{id}}">{{t.requestsMessage}}</label>
        <input id="approve-message-{{id}}" name="message" maxlength="500">
        <span></span><button type="submit" id="approve-button-{{id}}">{{t.requestsApprove}}</button>
        </form>
        {{/canApprove}}
        <form method="post" action="{{denyPath}}" class="row-form" id="deny-{{id}}">
        <input type="hidden" name="csrf" value="{{layout.csrf}}">
        <input type="hidden" name="back" value="{{back}}">
        <label for="deny-message-{{id}}">{{t.requestsMessage}}</label>
        <input id="deny-message-{{id}}" name="message" maxlength="500">
        <span></span><button type="submit" class="secondary" id="deny-button-{{id}}">{{t.requestsDeny}}</button>
        </form>
        </li>
        """

    /// The access requests waiting (`page.requests`), on the dashboard and
    /// a room's page; the script keeps `#access-requests` up to date from
    /// `data-requests` (JSON).
    static let requestsPanel = """
        {{#requests}}
        <p class="note">{{t.requestsNote}}</p>
        {{#boundsNote}}<p class="error" id="requests-bounds">{{boundsNote}}</p>{{/boundsNote}}
        <p id="requests-none"{{#hasItems}} hidden{{/hasItems}}>{{t.requestsNone}}</p>
        <ul id="access-requests" class="requests" data-requests="{{livePath}}" aria-live="polite">
        {{#items}}
        \(requestItem)
        {{/items}}
        </ul>
        <template id="request-template">{{#template}}
        \(requestItem)
        {{/template}}</template>
        {{/requests}}
        """

    /// The table of records, shared by the records page and the timeline.
    static let recordRows = """
        {{#hasRows}}
        <div class="scroll">
        <table id="records">
        <caption class="visually-hidden">{{caption}}</caption>
        <thead>
        <tr>
        <th scope="col">{{t.time}}</th>
        {{#showUser}}<th scope="col">{{t.user}}</th>{{/showUser}}
        <th scope="col">{{t.machine}}</th>
        <th scope="col">{{t.room}}</th>
        <th scope="col">{{t.group}}</th>
        <th scope="col">{{t.kind}}</th>
        <th scope="col">{{t.host}}</th>
        <th scope="col">{{t.action}}</th>
        <th scope="col">{{t.category}}</th>
        <th scope="col">{{t.reason}}</th>
        </tr>
        </thead>
        <tbody>
        {{#rows}}
        <tr>
        <td class="nowrap"><time datetime="{{iso}}">{{time}}</time></td>
        {{#showUser}}<td>{{#timelineLink}}<a href="{{timelineLink}}">{{user}}</a>{{/timelineLink}}{{^timelineLink}}{{user}}{{/timelineLink}}</td>{{/showUser}}
        <td>{{hostname}}</td>
        <td>{{room}}</td>
        <td>{{group}}</td>
        <td>{{kind}}</td>
        <td class="wrap">{{host}}{{#url}}<br><span class="url">{{url}}</span>{{/url}}</td>
        <td><span class="action action-{{action}}">{{actionLabel}}</span></td>
        <td>{{category}}</td>
        <td class="wrap">{{reason}}</td>
        </tr>
        {{/rows}}
        </tbody>
        </table>
        </div>
        {{/hasRows}}
        {{^hasRows}}
        <p id="no-records">{{t.noRecords}}</p>
        {{/hasRows}}
        {{#hasPages}}
        <nav class="pages" aria-label="{{t.pagesLabel}}">
        {{#firstLink}}<a href="{{firstLink}}">{{t.firstPage}}</a>{{/firstLink}}
        {{#nextLink}}<a href="{{nextLink}}" rel="next" id="next-page">{{t.nextPage}}</a>{{/nextLink}}
        </nav>
        {{/hasPages}}
        """

    static let records = """
        {{<layout}}{{$content}}{{#page}}
        {{#scopeText}}
        <p class="note" id="scope">{{scopeText}}</p>
        {{/scopeText}}
        {{#pseudonymous}}
        <p class="note" id="pseudonyms">{{t.pseudonymsNote}}</p>
        {{/pseudonymous}}
        <form method="get" action="/console/records" class="filters" role="search" aria-label="{{t.recordsFilters}}">
        {{#filters}}
        <fieldset class="dates">
        <legend>{{t.dateRange}}</legend>
        <p class="note" id="time-zone">{{timeZoneNote}}</p>
        <div><label for="since">{{t.since}}</label><input type="date" id="since" name="since" value="{{since}}"></div>
        <div><label for="until">{{t.until}}</label><input type="date" id="until" name="until" value="{{until}}"></div>
        </fieldset>
        <div><label for="user">{{t.user}}</label><input id="user" name="user" value="{{user}}" maxlength="256"></div>
        <div><label for="machine">{{t.machineID}}</label><input id="machine" name="machine" value="{{machine}}" maxlength="22"></div>
        <div><label for="room">{{t.room}}</label><input id="room" name="room" value="{{room}}" maxlength="64"></div>
        <div><label for="group">{{t.group}}</label><input id="group" name="group" value="{{group}}" maxlength="256"></div>
        <div><label for="category">{{t.category}}</label><input id="category" name="category" value="{{category}}" maxlength="256"></div>
        <div><label for="kind">{{t.kind}}</label><input id="kind" name="kind" value="{{kind}}" maxlength="32"></div>
        <div><label for="action">{{t.action}}</label>
        <select id="action" name="action">
        {{#actions}}
        <option value="{{value}}"{{#selected}} selected{{/selected}}>{{label}}</option>
        {{/actions}}
        </select></div>
        {{/filters}}
        <div class="buttons"><button type="submit">{{t.search}}</button> <a href="/console/records">{{t.clearFilters}}</a></div>
        </form>
        {{#error}}
        <p class="error" role="alert" id="filter-error">{{error}}</p>
        {{/error}}
        {{^error}}
        <p><a href="{{csvLink}}" id="export-csv">{{t.exportCSV}}</a></p>
        {{/error}}
        {{#table}}
        \(recordRows)
        {{/table}}
        {{/page}}{{/content}}{{/layout}}
        """

    static let timeline = """
        {{<layout}}{{$content}}{{#page}}
        {{#scopeText}}
        <p class="note" id="scope">{{scopeText}}</p>
        {{/scopeText}}
        <p class="note">{{t.timelineNote}}</p>
        <form method="get" action="/console/timeline" class="filters" aria-label="{{t.dateRange}}">
        <input type="hidden" name="user" value="{{userQuery}}">
        <fieldset class="dates">
        <legend>{{t.dateRange}}</legend>
        <p class="note" id="time-zone">{{timeZoneNote}}</p>
        <div><label for="since">{{t.since}}</label><input type="date" id="since" name="since" value="{{since}}"></div>
        <div><label for="until">{{t.until}}</label><input type="date" id="until" name="until" value="{{until}}"></div>
        </fieldset>
        <div class="buttons"><button type="submit">{{t.show}}</button></div>
        </form>
        {{#error}}
        <p class="error" role="alert" id="filter-error">{{error}}</p>
        {{/error}}
        {{#exportLink}}
        <p id="export"><a href="{{exportLink}}" id="export-link" download>{{t.exportPerson}}</a> <span class="note">{{t.exportPersonNote}}</span></p>
        {{/exportLink}}
        {{#table}}
        \(recordRows)
        {{/table}}
        {{/page}}{{/content}}{{/layout}}
        """

    static let machines = """
        {{<layout}}{{$content}}{{#page}}
        {{#scopeText}}
        <p class="note" id="scope">{{scopeText}}</p>
        {{/scopeText}}
        <form method="get" action="/console/machines" class="filters" aria-label="{{t.machinesFilter}}">
        <div><label for="state">{{t.machineState}}</label>
        <select id="state" name="state">
        {{#states}}
        <option value="{{value}}"{{#selected}} selected{{/selected}}>{{label}}</option>
        {{/states}}
        </select></div>
        <div class="buttons"><button type="submit">{{t.show}}</button></div>
        </form>
        <p class="note">{{publishedText}}</p>
        {{#hasMachines}}
        <div class="scroll">
        <table id="machines">
        <caption class="visually-hidden">{{t.machinesCaption}}</caption>
        <thead>
        <tr>
        <th scope="col">{{t.hostname}}</th>
        <th scope="col">{{t.room}}</th>
        <th scope="col">{{t.machineState}}</th>
        <th scope="col" class="number">{{t.rulesVersion}}</th>
        <th scope="col">{{t.lastCheckIn}}</th>
        <th scope="col" class="number">{{t.filterDataRestarts}}</th>
        <th scope="col" class="number">{{t.queueDrops}}</th>
        <th scope="col" class="number">{{t.recordsDropped}}</th>
        {{#canRevoke}}<th scope="col">{{t.revokeHeading}}</th>{{/canRevoke}}
        </tr>
        </thead>
        <tbody>
        {{#rows}}
        <tr id="machine-{{id}}">
        <th scope="row">{{hostname}}<br><span class="note">{{id}}</span></th>
        <td>{{room}}</td>
        <td><span class="state state-{{state}}">{{stateLabel}}</span></td>
        <td class="number">{{rulesVersion}}</td>
        <td class="nowrap">{{lastCheckIn}}</td>
        <td class="number">{{restarts}}</td>
        <td class="number">{{queueDrops}}</td>
        <td class="number">{{recordsDropped}}</td>
        {{#canRevoke}}
        <td>{{#revokeAction}}<form method="post" action="{{revokeAction}}" data-confirm="{{t.revokeConfirm}}">
        <input type="hidden" name="csrf" value="{{layout.csrf}}">
        <button type="submit" class="danger">{{t.revoke}}<span class="visually-hidden"> {{hostname}}</span></button>
        </form>{{/revokeAction}}</td>
        {{/canRevoke}}
        </tr>
        {{/rows}}
        </tbody>
        </table>
        </div>
        {{/hasMachines}}
        {{^hasMachines}}
        <p id="no-machines">{{t.noMachines}}</p>
        {{/hasMachines}}
        {{/page}}{{/content}}{{/layout}}
        """

    static let policy = """
        {{<layout}}{{$content}}{{#page}}
        {{#current}}
        <p id="policy-current">{{currentText}}</p>
        {{/current}}
        {{^current}}
        <p id="policy-none">{{t.policyNone}}</p>
        {{/current}}
        {{#publication}}
        <p class="note" id="publication">{{publication}}</p>
        {{/publication}}
        {{#summary}}
        <section aria-labelledby="summary-heading">
        <h2 id="summary-heading">{{t.policySummary}}</h2>
        <dl class="pairs">
        <dt>{{t.policyTimeZone}}</dt><dd>{{timeZone}}</dd>
        <dt>{{t.policyEveryone}}</dt><dd>{{topLevelBlocks}}</dd>
        <dt>{{t.policyLocked}}</dt><dd id="locked-categories">{{locked}}</dd>
        <dt>{{t.policySafeSearch}}</dt><dd>{{safeSearch}}</dd>
        <dt>{{t.policyOverrides}}</dt><dd>{{overrides}}</dd>
        </dl>
        <h3>{{t.policyGroups}}</h3>
        {{#hasGroups}}
        <div class="scroll">
        <table id="policy-groups">
        <thead><tr><th scope="col">{{t.group}}</th><th scope="col">{{t.policyMembers}}</th><th scope="col">{{t.policyBlocked}}</th><th scope="col">{{t.policyDuring}}</th><th scope="col">{{t.policyExam}}</th></tr></thead>
        <tbody>
        {{#groups}}
        <tr><th scope="row">{{name}}</th><td>{{members}}</td><td>{{blocked}}</td><td>{{during}}</td><td>{{exam}}</td></tr>
        {{/groups}}
        </tbody>
        </table>
        </div>
        {{/hasGroups}}
        {{^hasGroups}}
        <p>{{t.policyNoGroups}}</p>
        {{/hasGroups}}
        <h3>{{t.policySchedules}}</h3>
        {{#hasSchedules}}
        <table id="policy-schedules">
        <thead><tr><th scope="col">{{t.policySchedule}}</th><th scope="col">{{t.policyDays}}</th><th scope="col">{{t.policyTimes}}</th></tr></thead>
        <tbody>
        {{#schedules}}
        <tr><th scope="row">{{name}}</th><td>{{days}}</td><td>{{times}}</td></tr>
        {{/schedules}}
        </tbody>
        </table>
        {{/hasSchedules}}
        {{^hasSchedules}}
        <p>{{t.policyNoSchedules}}</p>
        {{/hasSchedules}}
        <h3>{{t.policyExam}}</h3>
        <p>{{exam}}</p>
        <h3>{{t.policyBypass}}</h3>
        <table id="policy-bypass">
        <thead><tr><th scope="col">{{t.policyBypassKey}}</th><th scope="col">{{t.policyBypassValue}}</th></tr></thead>
        <tbody>
        {{#bypass}}
        <tr><th scope="row">{{key}}</th><td>{{value}}</td></tr>
        {{/bypass}}
        </tbody>
        </table>
        </section>
        {{/summary}}
        {{#summaryError}}
        <p class="error" id="summary-error">{{summaryError}}</p>
        {{/summaryError}}
        {{#form}}
        <section aria-labelledby="form-heading">
        <h2 id="form-heading">{{t.policyForm}}</h2>
        <p class="note" id="policy-form-note">{{t.policyFormIntro}}</p>
        {{#error}}
        <div class="error" role="alert" id="policy-form-errors"><p>{{t.policyFormRefused}}</p><ul><li>{{error}}</li></ul>{{#shownInYAML}}<p>{{t.policyFormShownInYAML}}</p>{{/shownInYAML}}</div>
        {{/error}}
        <form method="post" action="/console/policy/form" class="stack" id="policy-keys-form">
        <input type="hidden" name="csrf" value="{{layout.csrf}}">
        <p id="form-locked">{{t.policyFormLocked}} {{locked}}</p>
        {{#levels}}
        <fieldset id="{{id}}">
        <legend>{{legend}}</legend>
        <input type="hidden" name="{{prefix}}.shown" value="1">
        <fieldset>
        <legend>{{t.policyFormBlocked}}</legend>
        {{#isGroup}}
        <label><input type="radio" name="{{prefix}}.blockFrom" value="inherit"{{#blockInherits}} checked{{/blockInherits}}> {{t.policyFormInherit}}</label>
        <label><input type="radio" name="{{prefix}}.blockFrom" value="own"{{^blockInherits}} checked{{/blockInherits}}> {{t.policyFormOwn}}</label>
        {{/isGroup}}
        <label><input type="checkbox" name="{{prefix}}.block" value="all"{{#all}} checked{{/all}}> {{t.policyFormAll}}</label>
        {{#categories}}
        <label><input type="checkbox" name="{{prefix}}.block" value="{{value}}"{{#checked}} checked{{/checked}}> {{value}}</label>
        {{/categories}}
        </fieldset>
        <label for="{{id}}-unknown">{{t.policyFormUnknown}}</label>
        <select id="{{id}}-unknown" name="{{prefix}}.unknown">
        {{#unknown}}<option value="{{value}}"{{#selected}} selected{{/selected}}>{{label}}</option>{{/unknown}}
        </select>
        <fieldset>
        <legend>{{t.policyFormSafeSearch}}</legend>
        {{#isGroup}}
        <label><input type="radio" name="{{prefix}}.safeSearchFrom" value="inherit"{{#safeSearchInherits}} checked{{/safeSearchInherits}}> {{t.policyFormInherit}}</label>
        <label><input type="radio" name="{{prefix}}.safeSearchFrom" value="own"{{^safeSearchInherits}} checked{{/safeSearchInherits}}> {{t.policyFormOwn}}</label>
        {{/isGroup}}
        {{#engines}}
        <label><input type="checkbox" name="{{prefix}}.safeSearch" value="{{value}}"{{#checked}} checked{{/checked}}> {{value}}</label>
        {{/engines}}
        </fieldset>
        </fieldset>
        {{/levels}}
        <label for="form-reason">{{t.reasonRequired}}</label>
        <input id="form-reason" name="reason" required maxlength="1000" value="{{reason}}">
        <button type="submit">{{t.policyFormSave}}</button>
        </form>
        </section>
        {{/form}}
        {{#formUnavailable}}
        <p class="note" id="policy-form-unavailable">{{t.policyFormUnavailable}} {{formUnavailable}}</p>
        {{/formUnavailable}}
        <section aria-labelledby="yaml-heading">
        <h2 id="yaml-heading">{{t.policyYAML}}</h2>
        {{#errors}}
        <div class="error" role="alert" id="policy-errors"><p>{{t.policyRefused}}</p><ul>{{#messages}}<li>{{.}}</li>{{/messages}}</ul></div>
        {{/errors}}
        {{#canEdit}}
        <form method="post" action="/console/policy" class="stack" id="policy-form">
        <input type="hidden" name="csrf" value="{{layout.csrf}}">
        <label for="yaml">{{t.policyYAML}}</label>
        <textarea id="yaml" name="yaml" rows="24" spellcheck="false" class="code"{{#errors}} aria-describedby="policy-errors"{{/errors}}>{{yaml}}</textarea>
        <label for="reason">{{t.reasonRequired}}</label>
        <input id="reason" name="reason" required maxlength="1000" value="{{reason}}">
        <button type="submit">{{t.policySave}}</button>
        </form>
        {{/canEdit}}
        {{^canEdit}}
        <label for="yaml">{{t.policyYAML}}</label>
        <textarea id="yaml" rows="24" readonly class="code">{{yaml}}</textarea>
        {{/canEdit}}
        </section>
        {{#canEdit}}
        <section aria-labelledby="publish-heading">
        <h2 id="publish-heading">{{t.policyPublish}}</h2>
        {{#publishError}}<p class="error" role="alert" id="publish-error">{{publishError}}</p>{{/publishError}}
        <form method="post" action="/console/policy/publish" class="stack" id="publish-form">
        <input type="hidden" name="csrf" value="{{layout.csrf}}">
        <label for="publish-reason">{{t.reasonRequired}}</label>
        <input id="publish-reason" name="reason" required maxlength="1000">
        <button type="submit">{{t.policyPublishButton}}</button>
        </form>
        </section>
        {{/canEdit}}
        <section aria-labelledby="history-heading">
        <h2 id="history-heading">{{t.policyHistory}}</h2>
        {{#hasHistory}}
        <div class="scroll">
        <table id="policy-history">
        <thead><tr><th scope="col">{{t.policyVersion}}</th><th scope="col">{{t.time}}</th><th scope="col">{{t.author}}</th><th scope="col">{{t.reason}}</th><th scope="col">{{t.policyChanges}}</th></tr></thead>
        <tbody>
        {{#history}}
        <tr><th scope="row"><a href="{{viewLink}}">{{version}}</a></th><td class="nowrap">{{time}}</td><td>{{author}}</td><td class="wrap">{{reason}}</td><td>{{#diffLink}}<a href="{{diffLink}}">{{t.policyDiffPrevious}}</a>{{/diffLink}}</td></tr>
        {{/history}}
        </tbody>
        </table>
        </div>
        {{/hasHistory}}
        {{^hasHistory}}
        <p>{{t.policyNoHistory}}</p>
        {{/hasHistory}}
        {{#canRollBack}}
        <h3>{{t.policyRollback}}</h3>
        {{#rollbackError}}<p class="error" role="alert" id="rollback-error">{{rollbackError}}</p>{{/rollbackError}}
        <form method="post" action="/console/policy/rollback" class="stack" id="rollback-form">
        <input type="hidden" name="csrf" value="{{layout.csrf}}">
        <label for="rollback-version">{{t.policyRollbackTo}}</label>
        <select id="rollback-version" name="version" required>
        {{#history}}<option value="{{version}}">{{version}}</option>{{/history}}
        </select>
        <label for="rollback-reason">{{t.reasonRequired}}</label>
        <input id="rollback-reason" name="reason" required maxlength="1000">
        <button type="submit">{{t.policyRollbackButton}}</button>
        </form>
        {{/canRollBack}}
        </section>
        {{/page}}{{/content}}{{/layout}}
        """

    static let policyVersion = """
        {{<layout}}{{$content}}{{#page}}
        <p id="version-meta">{{meta}}</p>
        <p><a href="/console/policy">{{t.policyBack}}</a>{{#diffLink}} · <a href="{{diffLink}}">{{t.policyDiffPrevious}}</a>{{/diffLink}}</p>
        <h2>{{t.policyYAML}}</h2>
        {{#hasPolicy}}<pre class="code" id="version-yaml">{{yaml}}</pre>{{/hasPolicy}}
        {{^hasPolicy}}<p>{{t.policyNoFile}}</p>{{/hasPolicy}}
        <h2>{{t.policyLists}}</h2>
        {{#hasLists}}
        <table id="version-lists">
        <thead><tr><th scope="col">{{t.category}}</th><th scope="col" class="number">{{t.policyNames}}</th><th scope="col">SHA-256</th></tr></thead>
        <tbody>
        {{#lists}}<tr><th scope="row">{{category}}</th><td class="number">{{names}}</td><td class="wrap code">{{sha256}}</td></tr>{{/lists}}
        </tbody>
        </table>
        {{/hasLists}}
        {{^hasLists}}<p>{{t.policyNoLists}}</p>{{/hasLists}}
        {{/page}}{{/content}}{{/layout}}
        """

    static let policyDiff = """
        {{<layout}}{{$content}}{{#page}}
        <p><a href="/console/policy">{{t.policyBack}}</a></p>
        <h2>{{t.policyYAML}}</h2>
        {{#hasPolicyChanges}}
        <pre class="diff code" id="policy-diff">{{#lines}}<span class="{{kind}}">{{text}}</span>
        {{/lines}}</pre>
        {{/hasPolicyChanges}}
        {{^hasPolicyChanges}}<p>{{t.policySame}}</p>{{/hasPolicyChanges}}
        <h2>{{t.policyLists}}</h2>
        {{#hasListChanges}}
        <table id="list-changes">
        <thead><tr><th scope="col">{{t.category}}</th><th scope="col" class="number">{{t.policyAdded}}</th><th scope="col" class="number">{{t.policyRemoved}}</th><th scope="col">{{t.policySample}}</th></tr></thead>
        <tbody>
        {{#lists}}<tr><th scope="row">{{category}}</th><td class="number">{{added}}</td><td class="number">{{removed}}</td><td class="wrap">{{sample}}</td></tr>{{/lists}}
        </tbody>
        </table>
        {{/hasListChanges}}
        {{^hasListChanges}}<p>{{t.policyListsSame}}</p>{{/hasListChanges}}
        {{/page}}{{/content}}{{/layout}}
        """

    static let people = """
        {{<layout}}{{$content}}{{#page}}
        {{#error}}<p class="error" role="alert" id="people-error">{{error}}</p>{{/error}}
        {{#hasPeople}}
        <div class="scroll">
        <table id="people">
        <caption class="visually-hidden">{{t.peopleCaption}}</caption>
        <thead><tr><th scope="col">{{t.peopleLogin}}</th><th scope="col">{{t.peopleName}}</th><th scope="col">{{t.peopleRole}}</th><th scope="col">{{t.peopleRooms}}</th><th scope="col">{{t.peopleGroups}}</th><th scope="col">{{t.peopleEmail}}</th><th scope="col">{{t.peopleMethod}}</th><th scope="col">{{t.peopleStatus}}</th><th scope="col">{{t.peopleLastSignIn}}</th>{{#canManage}}<th scope="col">{{t.peopleChange}}</th>{{/canManage}}</tr></thead>
        <tbody>
        {{#rows}}
        <tr>
        <th scope="row">{{login}}</th><td>{{name}}</td><td>{{roleLabel}}</td><td>{{rooms}}</td><td>{{groups}}</td><td>{{email}}</td><td>{{method}}</td><td>{{status}}</td><td class="nowrap">{{lastSignIn}}</td>
        {{#canManage}}
        <td>
        <form method="post" action="{{changeAction}}" class="row-form">
        <input type="hidden" name="csrf" value="{{layout.csrf}}">
        <label for="role-{{index}}">{{t.peopleRole}}</label>
        <select id="role-{{index}}" name="role">{{#roles}}<option value="{{value}}"{{#selected}} selected{{/selected}}>{{label}}</option>{{/roles}}</select>
        <label for="rooms-{{index}}">{{t.peopleRooms}}</label>
        <input id="rooms-{{index}}" name="rooms" value="{{rooms}}">
        <label for="groups-{{index}}">{{t.peopleGroups}}</label>
        <input id="groups-{{index}}" name="groups" value="{{groups}}">
        <label for="email-{{index}}">{{t.peopleEmail}}</label>
        <input id="email-{{index}}" name="email" type="email" value="{{email}}" maxlength="254" autocomplete="off">
        <label for="enabled-{{index}}">{{t.peopleEnabled}}</label>
        <input type="checkbox" id="enabled-{{index}}" name="enabled" value="yes"{{#enabled}} checked{{/enabled}}>
        <button type="submit">{{t.peopleSave}}<span class="visually-hidden"> {{login}}</span></button>
        </form>
        </td>
        {{/canManage}}
        </tr>
        {{/rows}}
        </tbody>
        </table>
        </div>
        {{/hasPeople}}
        {{^hasPeople}}<p>{{t.peopleNone}}</p>{{/hasPeople}}
        {{#canManage}}
        <section aria-labelledby="add-heading">
        <h2 id="add-heading">{{t.peopleAdd}}</h2>
        <form method="post" action="/console/people" class="stack" id="add-person">
        <input type="hidden" name="csrf" value="{{layout.csrf}}">
        <label for="new-login">{{t.peopleLogin}}</label>
        <input id="new-login" name="login" required maxlength="64" autocomplete="off">
        <label for="new-name">{{t.peopleName}}</label>
        <input id="new-name" name="name" maxlength="200" autocomplete="off">
        <label for="new-role">{{t.peopleRole}}</label>
        <select id="new-role" name="role">{{#newRoles}}<option value="{{value}}">{{label}}</option>{{/newRoles}}</select>
        <label for="new-rooms">{{t.peopleRooms}}</label>
        <input id="new-rooms" name="rooms" aria-describedby="scope-help">
        <label for="new-groups">{{t.peopleGroups}}</label>
        <input id="new-groups" name="groups" aria-describedby="scope-help">
        <p class="note" id="scope-help">{{t.peopleScopeHelp}}</p>
        <label for="new-email">{{t.peopleEmail}}</label>
        <input id="new-email" name="email" type="email" maxlength="254" autocomplete="off" aria-describedby="email-help">
        <p class="note" id="email-help">{{t.peopleEmailHelp}}</p>
        <label for="new-password">{{t.password}}</label>
        <input id="new-password" name="password" type="password" autocomplete="new-password" aria-describedby="password-help">
        <p class="note" id="password-help">{{t.peoplePasswordHelp}}</p>
        <button type="submit">{{t.peopleAddButton}}</button>
        </form>
        </section>
        {{/canManage}}
        {{/page}}{{/content}}{{/layout}}
        """

    static let audit = """
        {{<layout}}{{$content}}{{#page}}
        <form method="get" action="/console/audit" class="filters" role="search" aria-label="{{t.auditFilters}}">
        <div><label for="actor">{{t.auditActor}}</label><input id="actor" name="actor" value="{{actor}}" maxlength="200"></div>
        <div><label for="audit-action">{{t.auditAction}}</label><input id="audit-action" name="action" value="{{action}}" maxlength="64"></div>
        <fieldset class="dates">
        <legend>{{t.dateRange}}</legend>
        <p class="note" id="time-zone">{{timeZoneNote}}</p>
        <div><label for="since">{{t.since}}</label><input type="date" id="since" name="since" value="{{since}}"></div>
        <div><label for="until">{{t.until}}</label><input type="date" id="until" name="until" value="{{until}}"></div>
        </fieldset>
        <div class="buttons"><button type="submit">{{t.search}}</button> <a href="/console/audit">{{t.clearFilters}}</a></div>
        </form>
        {{#error}}<p class="error" role="alert" id="filter-error">{{error}}</p>{{/error}}
        {{#hasEvents}}
        <div class="scroll">
        <table id="audit">
        <caption class="visually-hidden">{{t.auditCaption}}</caption>
        <thead><tr><th scope="col">{{t.time}}</th><th scope="col">{{t.auditActor}}</th><th scope="col">{{t.auditAction}}</th><th scope="col">{{t.auditTarget}}</th><th scope="col">{{t.reason}}</th></tr></thead>
        <tbody>
        {{#rows}}<tr><td class="nowrap"><time datetime="{{iso}}">{{time}}</time></td><td>{{actor}}</td><td>{{action}}</td><td class="wrap">{{target}}</td><td class="wrap">{{reason}}</td></tr>{{/rows}}
        </tbody>
        </table>
        </div>
        {{/hasEvents}}
        {{^hasEvents}}<p id="no-events">{{t.auditNone}}</p>{{/hasEvents}}
        {{#hasPages}}
        <nav class="pages" aria-label="{{t.pagesLabel}}">
        {{#firstLink}}<a href="{{firstLink}}">{{t.firstPage}}</a>{{/firstLink}}
        {{#nextLink}}<a href="{{nextLink}}" rel="next" id="next-page">{{t.nextPage}}</a>{{/nextLink}}
        </nav>
        {{/hasPages}}
        {{/page}}{{/content}}{{/layout}}
        """

    /// The queue of safeguarding alerts (ids for the tests: `alerts`, `alert-ID`).
    static let alerts = """
        {{<layout}}{{$content}}{{#page}}
        {{#scopeText}}
        <p class="note" id="scope">{{scopeText}}</p>
        {{/scopeText}}
        {{#deliveries}}<p class="error" role="alert" id="alert-deliveries">{{deliveries}}</p>{{/deliveries}}
        <form method="get" action="/console/alerts" class="filters" role="search" aria-label="{{t.alertFilters}}">
        <div><label for="alert-state">{{t.alertStateLabel}}</label><select id="alert-state" name="state">
        {{#states}}<option value="{{value}}"{{#selected}} selected{{/selected}}>{{label}}</option>{{/states}}
        </select></div>
        <div><label for="alert-severity">{{t.alertSeverity}}</label><select id="alert-severity" name="severity">
        {{#severities}}<option value="{{value}}"{{#selected}} selected{{/selected}}>{{label}}</option>{{/severities}}
        </select></div>
        <div class="buttons"><button type="submit">{{t.show}}</button></div>
        </form>
        {{#hasRows}}
        <div class="scroll">
        <table id="alerts">
        <caption class="visually-hidden">{{t.titleAlerts}}</caption>
        <thead><tr><th scope="col">{{t.time}}</th><th scope="col">{{t.alertSeverity}}</th><th scope="col">{{t.alertRule}}</th><th scope="col">{{t.user}}</th><th scope="col">{{t.group}}</th><th scope="col">{{t.room}}</th><th scope="col">{{t.alertWhat}}</th><th scope="col">{{t.alertFlow}}</th><th scope="col">{{t.alertStateLabel}}</th></tr></thead>
        <tbody>
        {{#rows}}<tr id="alert-{{id}}" data-alert="{{id}}"><td class="nowrap"><a href="{{href}}">{{time}}</a></td><td><span class="severity severity-{{severity}}">{{severityLabel}}</span></td><td>{{rule}}</td><td>{{user}}</td><td>{{group}}</td><td>{{room}}</td><td class="wrap">{{what}}</td><td>{{action}}</td><td><span class="state alert-{{state}}">{{stateLabel}}</span></td></tr>{{/rows}}
        </tbody>
        </table>
        </div>
        {{/hasRows}}
        {{^hasRows}}<p id="no-alerts">{{t.alertsNone}}</p>{{/hasRows}}
        {{#next}}<nav class="pages" aria-label="{{t.pagesLabel}}"><a href="{{next}}" rel="next" id="next-page">{{t.nextPage}}</a></nav>{{/next}}
        {{/page}}{{/content}}{{/layout}}
        """

    /// One alert: what the record showed, where its email and webhook
    /// stand, and the triage forms (`acknowledge-form`, `escalate-form`, `close-form`).
    static let alert = """
        {{<layout}}{{$content}}{{#page}}
        {{#problem}}<p class="error" role="alert" id="triage-error">{{problem}}</p>{{/problem}}
        <dl class="pairs" id="alert-fields">
        {{#pairs}}<dt>{{label}}</dt><dd class="wrap">{{value}}</dd>{{/pairs}}
        </dl>
        {{#timeline}}<p><a href="{{timeline}}" id="timeline-link">{{t.alertTimeline}}</a></p>{{/timeline}}
        <section aria-labelledby="deliveries-heading">
        <h2 id="deliveries-heading">{{t.alertDeliveries}}</h2>
        {{#hasDeliveries}}
        <table id="deliveries">
        <thead><tr><th scope="col">{{t.deliveryChannel}}</th><th scope="col">{{t.deliveryTarget}}</th><th scope="col">{{t.alertStateLabel}}</th><th scope="col" class="number">{{t.deliveryAttempts}}</th><th scope="col">{{t.deliveryDetail}}</th></tr></thead>
        <tbody>
        {{#deliveries}}<tr><td>{{channel}}</td><td class="wrap">{{target}}</td><td><span class="state delivery-{{state}}">{{stateLabel}}</span></td><td class="number">{{attempts}}</td><td class="wrap">{{detail}}</td></tr>{{/deliveries}}
        </tbody>
        </table>
        {{/hasDeliveries}}
        {{^hasDeliveries}}<p id="no-deliveries">{{t.alertNoDeliveries}}</p>{{/hasDeliveries}}
        </section>
        {{#canClose}}
        <section aria-labelledby="triage-heading">
        <h2 id="triage-heading">{{t.alertTriage}}</h2>
        {{#canAcknowledge}}
        <form method="post" action="{{acknowledgePath}}" class="row-form" id="acknowledge-form">
        <input type="hidden" name="csrf" value="{{layout.csrf}}">
        <label for="acknowledge-note">{{t.alertNote}}</label><input id="acknowledge-note" name="note" maxlength="2000">
        <span></span><button type="submit" id="acknowledge-button">{{t.alertAcknowledge}}</button>
        </form>
        {{/canAcknowledge}}
        {{#canEscalate}}
        <form method="post" action="{{escalatePath}}" class="row-form" id="escalate-form">
        <input type="hidden" name="csrf" value="{{layout.csrf}}">
        <label for="escalate-note">{{t.alertNote}}</label><input id="escalate-note" name="note" maxlength="2000">
        <span></span><button type="submit" class="secondary" id="escalate-button">{{t.alertEscalate}}</button>
        </form>
        {{/canEscalate}}
        <form method="post" action="{{closePath}}" class="row-form" id="close-form">
        <input type="hidden" name="csrf" value="{{layout.csrf}}">
        <label for="close-note">{{t.alertCloseNote}}</label><textarea id="close-note" name="note" maxlength="2000" required></textarea>
        <span></span><button type="submit" class="secondary" id="close-button">{{t.alertClose}}</button>
        </form>
        </section>
        {{/canClose}}
        {{/page}}{{/content}}{{/layout}}
        """

    /// The rooms of the principal's scope.
    static let rooms = """
        {{<layout}}{{$content}}{{#page}}
        {{#scopeText}}
        <p class="note" id="scope">{{scopeText}}</p>
        {{/scopeText}}
        {{#hasRooms}}
        <table id="rooms">
        <caption class="visually-hidden">{{t.roomsCaption}}</caption>
        <thead><tr><th scope="col">{{t.room}}</th><th scope="col" class="number">{{t.machinesCount}}</th><th scope="col" class="number">{{t.roomRulesCount}}</th></tr></thead>
        <tbody>
        {{#rows}}
        <tr><th scope="row"><a href="{{href}}">{{room}}</a></th><td class="number">{{machines}}</td><td class="number">{{rules}}</td></tr>
        {{/rows}}
        </tbody>
        </table>
        {{/hasRooms}}
        {{^hasRooms}}
        <p id="no-rooms">{{t.noRooms}}</p>
        {{/hasRooms}}
        {{/page}}{{/content}}{{/layout}}
        """

    /// A room: its rules in force, the form that adds one, and the room live
    /// (refreshed by the console's script from `livePath`).
    static let room = """
        {{<layout}}{{$content}}{{#page}}
        <section aria-labelledby="rules-heading">
        <h2 id="rules-heading">{{t.roomRules}}</h2>
        {{#hasRules}}
        <table id="rules">
        <caption class="visually-hidden">{{t.roomRules}}</caption>
        <thead><tr><th scope="col">{{t.roomAction}}</th><th scope="col">{{t.roomTargets}}</th><th scope="col">{{t.roomUntil}}</th><th scope="col">{{t.roomBy}}</th><th scope="col">{{t.reason}}</th><th scope="col">{{t.roomEnd}}</th></tr></thead>
        <tbody>
        {{#rules}}
        <tr id="rule-{{id}}">
        <td><span class="action action-{{action}}">{{actionLabel}}</span></td>
        <td class="wrap">{{targets}}</td>
        <td class="nowrap">{{until}}</td>
        <td>{{by}}</td>
        <td class="wrap">{{reason}}</td>
        <td><form method="post" action="{{path}}/end" class="inline">
        <input type="hidden" name="csrf" value="{{layout.csrf}}">
        <input type="hidden" name="rule" value="{{id}}">
        <button type="submit" class="secondary">{{t.roomEnd}}<span class="visually-hidden"> {{actionLabel}} {{targets}}</span></button>
        </form></td>
        </tr>
        {{/rules}}
        </tbody>
        </table>
        <form method="post" action="{{path}}/end">
        <input type="hidden" name="csrf" value="{{layout.csrf}}">
        <p><button type="submit" class="danger" id="end-all">{{t.roomEndAll}}</button></p>
        </form>
        {{/hasRules}}
        {{^hasRules}}
        <p id="no-rules">{{t.roomNoRules}}</p>
        {{/hasRules}}
        </section>
        <section aria-labelledby="add-heading">
        <h2 id="add-heading">{{t.roomAdd}}</h2>
        {{#boundsNote}}<p class="error" id="bounds">{{boundsNote}}</p>{{/boundsNote}}
        {{#error}}<p class="error" id="rule-error" role="alert">{{error}}</p>{{/error}}
        <form method="post" action="{{path}}/rules" class="stack narrow">
        <input type="hidden" name="csrf" value="{{layout.csrf}}">
        <label for="action">{{t.roomAction}}</label>
        <select id="action" name="action">
        {{#actions}}<option value="{{value}}"{{#selected}} selected{{/selected}}>{{label}}</option>{{/actions}}
        </select>
        <label for="targets">{{t.roomTargets}}</label>
        <input id="targets" name="targets" value="{{targets}}" aria-describedby="targets-note">
        <p class="note" id="targets-note">{{t.roomTargetsNote}}</p>
        <label for="duration">{{t.roomDuration}}</label>
        <select id="duration" name="duration">
        {{#durations}}<option value="{{value}}"{{#selected}} selected{{/selected}}>{{label}}</option>{{/durations}}
        </select>
        <label for="reason">{{t.reason}}</label>
        <input id="reason" name="reason" value="{{reason}}" maxlength="500">
        <button type="submit">{{t.roomAddButton}}</button>
        </form>
        </section>
        {{#requests}}
        <section aria-labelledby="requests-heading" id="requests">
        <h2 id="requests-heading">{{t.dashboardRequests}}</h2>
        {{/requests}}
        \(requestsPanel)
        {{#requests}}
        </section>
        {{/requests}}
        <section aria-labelledby="live-heading">
        <h2 id="live-heading">{{t.roomLive}}</h2>
        <p class="note">{{t.roomLiveNote}}</p>
        <table id="room-live" data-live="{{livePath}}">
        <caption class="visually-hidden">{{t.roomLive}}</caption>
        <thead><tr><th scope="col">{{t.hostname}}</th><th scope="col">{{t.machineState}}</th><th scope="col">{{t.roomUsers}}</th><th scope="col">{{t.roomBlocked}}</th></tr></thead>
        <tbody>
        {{#machines}}
        <tr id="machine-{{id}}"><th scope="row">{{hostname}}</th><td><span class="state state-{{state}}">{{stateLabel}}</span></td><td>{{users}}</td><td class="wrap">{{blocked}}</td></tr>
        {{/machines}}
        </tbody>
        </table>
        {{^hasMachines}}<p id="no-machines">{{t.noMachines}}</p>{{/hasMachines}}
        </section>
        {{/page}}{{/content}}{{/layout}}
        """

    /// The annual review: each group's policy, the locked categories, the
    /// latest filtering test, the policy's history, who holds which role,
    /// the changes since the last review, and the form that records one.
    static let review = """
        {{<layout}}{{$content}}{{#page}}
        {{#problem}}<p class="error" role="alert" id="review-error">{{problem}}</p>{{/problem}}
        <p class="note" id="review-made">{{made}}</p>
        <p id="review-last">{{last}}</p>
        <p><a href="/console/review.pdf" id="review-pdf">{{t.reviewPDF}}</a> · <a href="/console/filtering-tests" id="filtering-tests-link">{{t.titleFilteringTests}}</a></p>
        <section aria-labelledby="groups-heading">
        <h2 id="groups-heading">{{t.reviewGroups}}</h2>
        {{#hasPolicy}}
        <div class="scroll">
        <table id="review-groups">
        <thead><tr><th scope="col">{{t.group}}</th><th scope="col">{{t.reviewBlocked}}</th><th scope="col">{{t.reviewAllowed}}</th><th scope="col">{{t.reviewDenied}}</th></tr></thead>
        <tbody>
        {{#groups}}<tr><th scope="row">{{name}}</th><td class="wrap">{{blocked}}</td><td class="wrap">{{allowed}}</td><td class="wrap">{{denied}}</td></tr>{{/groups}}
        </tbody>
        </table>
        </div>
        <p id="review-locked">{{locked}}</p>
        {{/hasPolicy}}
        {{^hasPolicy}}<p id="review-no-policy">{{t.reviewNoPolicy}}</p>{{/hasPolicy}}
        </section>
        <section aria-labelledby="test-heading">
        <h2 id="test-heading">{{t.reviewTest}}</h2>
        <p id="review-test">{{testSummary}}{{#testLink}} <a href="{{testLink}}" id="review-test-link">{{t.reviewTestDetails}}</a>{{/testLink}}</p>
        {{#allBlocked}}<p id="review-test-passed">{{t.reviewTestAllBlocked}}</p>{{/allBlocked}}
        {{#hasFailures}}
        <table id="review-failures">
        <thead><tr><th scope="col">{{t.filteringTestMachine}}</th><th scope="col">{{t.group}}</th><th scope="col">{{t.filteringTestName}}</th><th scope="col">{{t.category}}</th><th scope="col" class="number">{{t.filteringTestBundle}}</th></tr></thead>
        <tbody>
        {{#failures}}<tr><td class="wrap">{{machine}}</td><td>{{group}}</td><td>{{name}}</td><td>{{category}}</td><td class="number">{{bundle}}</td></tr>{{/failures}}
        </tbody>
        </table>
        {{/hasFailures}}
        {{#canStart}}
        <form method="post" action="/console/filtering-tests" class="inline" id="filtering-test-form">
        <input type="hidden" name="csrf" value="{{layout.csrf}}">
        <button type="submit" id="filtering-test-button">{{t.filteringTestStart}}</button>
        </form>
        {{/canStart}}
        </section>
        <section aria-labelledby="history-heading">
        <h2 id="history-heading">{{t.reviewHistory}}</h2>
        <div class="scroll">
        <table id="review-history">
        <thead><tr><th scope="col" class="number">{{t.reviewVersion}}</th><th scope="col">{{t.time}}</th><th scope="col">{{t.reviewAuthor}}</th><th scope="col">{{t.reason}}</th></tr></thead>
        <tbody>
        {{#history}}<tr><td class="number">{{version}}</td><td class="nowrap">{{time}}</td><td>{{author}}</td><td class="wrap">{{reason}}</td></tr>{{/history}}
        </tbody>
        </table>
        </div>
        <h3 id="publications-heading">{{t.reviewPublications}}</h3>
        <div class="scroll">
        <table id="review-publications">
        <thead><tr><th scope="col" class="number">{{t.reviewBundle}}</th><th scope="col" class="number">{{t.reviewVersion}}</th><th scope="col">{{t.time}}</th><th scope="col">{{t.reviewAuthor}}</th><th scope="col">{{t.reason}}</th></tr></thead>
        <tbody>
        {{#publications}}<tr><td class="number">{{bundle}}</td><td class="number">{{version}}</td><td class="nowrap">{{time}}</td><td>{{author}}</td><td class="wrap">{{reason}}</td></tr>{{/publications}}
        </tbody>
        </table>
        </div>
        </section>
        <section aria-labelledby="roles-heading">
        <h2 id="roles-heading">{{t.reviewRoles}}</h2>
        <div class="scroll">
        <table id="review-people">
        <thead><tr><th scope="col">{{t.login}}</th><th scope="col">{{t.reviewPerson}}</th><th scope="col">{{t.reviewRole}}</th><th scope="col">{{t.reviewScope}}</th></tr></thead>
        <tbody>
        {{#people}}<tr><th scope="row">{{name}}</th><td>{{detail}}</td><td>{{role}}</td><td class="wrap">{{scope}}</td></tr>{{/people}}
        </tbody>
        </table>
        </div>
        <h3 id="tokens-heading">{{t.reviewTokens}}</h3>
        <div class="scroll">
        <table id="review-tokens">
        <thead><tr><th scope="col">{{t.reviewToken}}</th><th scope="col">{{t.reviewCreatedBy}}</th><th scope="col">{{t.reviewRole}}</th><th scope="col">{{t.reviewScope}}</th></tr></thead>
        <tbody>
        {{#tokens}}<tr><th scope="row">{{name}}</th><td>{{detail}}</td><td>{{role}}</td><td class="wrap">{{scope}}</td></tr>{{/tokens}}
        </tbody>
        </table>
        </div>
        </section>
        <section aria-labelledby="changes-heading">
        <h2 id="changes-heading">{{t.reviewChanges}}</h2>
        {{#hasChanges}}
        <div class="scroll">
        <table id="review-changes">
        <thead><tr><th scope="col">{{t.time}}</th><th scope="col">{{t.auditActor}}</th><th scope="col">{{t.auditAction}}</th><th scope="col">{{t.auditTarget}}</th><th scope="col">{{t.reason}}</th></tr></thead>
        <tbody>
        {{#changes}}<tr><td class="nowrap">{{time}}</td><td>{{actor}}</td><td>{{action}}</td><td class="wrap">{{target}}</td><td class="wrap">{{reason}}</td></tr>{{/changes}}
        </tbody>
        </table>
        </div>
        {{#moreChanges}}<p class="note">{{t.reviewMoreChanges}}</p>{{/moreChanges}}
        {{/hasChanges}}
        {{^hasChanges}}<p id="review-no-changes">{{t.reviewNoChanges}}</p>{{/hasChanges}}
        </section>
        {{#canRecord}}
        <section aria-labelledby="record-heading">
        <h2 id="record-heading">{{t.reviewRecord}}</h2>
        <form method="post" action="/console/review" class="row-form" id="review-form">
        <input type="hidden" name="csrf" value="{{layout.csrf}}">
        <label for="review-note">{{t.reviewRecordNote}}</label><textarea id="review-note" name="note" maxlength="2000" required></textarea>
        <span></span><button type="submit" id="review-button">{{t.reviewRecordButton}}</button>
        </form>
        </section>
        {{/canRecord}}
        {{/page}}{{/content}}{{/layout}}
        """

    /// The filtering test's runs, and the form that starts one.
    static let filteringTests = """
        {{<layout}}{{$content}}{{#page}}
        <p class="note">{{t.filteringTestsIntro}}</p>
        {{#canStart}}
        <form method="post" action="/console/filtering-tests" class="inline" id="filtering-test-form">
        <input type="hidden" name="csrf" value="{{layout.csrf}}">
        <button type="submit" id="filtering-test-button">{{t.filteringTestStart}}</button>
        </form>
        {{/canStart}}
        {{#hasRows}}
        <table id="filtering-tests">
        <thead><tr><th scope="col">{{t.filteringTestRun}}</th><th scope="col">{{t.time}}</th><th scope="col">{{t.reviewAuthor}}</th><th scope="col" class="number">{{t.filteringTestBundle}}</th><th scope="col" class="number">{{t.filteringTestAnswers}}</th><th scope="col" class="number">{{t.filteringTestFailures}}</th></tr></thead>
        <tbody>
        {{#rows}}<tr><th scope="row"><a href="{{href}}">{{number}}</a></th><td class="nowrap">{{time}}</td><td>{{by}}</td><td class="number">{{bundle}}</td><td class="number">{{answers}}</td><td class="number">{{#failed}}<strong>{{failures}}</strong>{{/failed}}{{^failed}}{{failures}}{{/failed}}</td></tr>{{/rows}}
        </tbody>
        </table>
        {{/hasRows}}
        {{^hasRows}}<p id="no-filtering-tests">{{t.reviewTestNone}}</p>{{/hasRows}}
        {{/page}}{{/content}}{{/layout}}
        """

    /// One run of the filtering test: the machines' answers and every result.
    static let filteringTest = """
        {{<layout}}{{$content}}{{#page}}
        <p id="filtering-test-summary">{{summary}}</p>
        <section aria-labelledby="answers-heading">
        <h2 id="answers-heading">{{t.filteringTestAnswers}}</h2>
        {{#hasAnswers}}
        <table id="filtering-test-answers">
        <thead><tr><th scope="col">{{t.filteringTestMachine}}</th><th scope="col">{{t.room}}</th><th scope="col">{{t.time}}</th><th scope="col" class="number">{{t.filteringTestBundle}}</th><th scope="col" class="number">{{t.filteringTestFailures}}</th></tr></thead>
        <tbody>
        {{#answers}}<tr><th scope="row" class="wrap">{{machine}}</th><td>{{room}}</td><td class="nowrap">{{time}}</td><td class="number">{{bundle}}</td><td class="number">{{#alert}}<a href="{{alert}}">{{failures}}</a>{{/alert}}{{^alert}}{{failures}}{{/alert}}</td></tr>{{/answers}}
        </tbody>
        </table>
        {{/hasAnswers}}
        {{^hasAnswers}}<p id="no-answers">{{t.filteringTestWaiting}}</p>{{/hasAnswers}}
        </section>
        {{#hasAnswers}}
        <section aria-labelledby="results-heading">
        <h2 id="results-heading">{{t.filteringTestResults}}</h2>
        <div class="scroll">
        <table id="filtering-test-results">
        <thead><tr><th scope="col">{{t.filteringTestMachine}}</th><th scope="col">{{t.group}}</th><th scope="col">{{t.filteringTestName}}</th><th scope="col">{{t.category}}</th><th scope="col">{{t.filteringTestExpected}}</th><th scope="col">{{t.filteringTestActual}}</th><th scope="col">{{t.reason}}</th><th scope="col" class="number">{{t.filteringTestBundle}}</th></tr></thead>
        <tbody>
        {{#results}}<tr{{#failed}} class="failed"{{/failed}}><td class="wrap">{{machine}}</td><td>{{group}}</td><td>{{name}}</td><td>{{category}}</td><td>{{expected}}</td><td>{{#failed}}<strong>{{t.filteringTestFailed}}</strong>{{/failed}}{{^failed}}{{actual}}{{/failed}}</td><td class="wrap">{{reason}}</td><td class="number">{{bundle}}</td></tr>{{/results}}
        </tbody>
        </table>
        </div>
        </section>
        {{/hasAnswers}}
        {{/page}}{{/content}}{{/layout}}
        """

    /// The digests made, newest first, and the previews of one's own.
    static let digests = """
        {{<layout}}{{$content}}{{#page}}
        <section aria-labelledby="preview-heading">
        <h2 id="preview-heading">{{t.digestPreviewHeading}}</h2>
        {{#scopeText}}<p class="note" id="scope">{{scopeText}}</p>{{/scopeText}}
        <p class="note">{{t.digestPreviewNote}}</p>
        <ul id="digest-previews">
        {{#previews}}<li>{{label}}: <a href="{{html}}" id="preview-{{kind}}">{{t.digestPreviewHTML}}</a>, <a href="{{pdf}}" id="preview-{{kind}}-pdf">{{t.digestPreviewPDF}}</a></li>{{/previews}}
        </ul>
        </section>
        <section aria-labelledby="sent-heading">
        <h2 id="sent-heading">{{t.digestsSentHeading}}</h2>
        <p class="note" id="time-zone">{{timeZoneNote}}</p>
        {{#hasRows}}
        <div class="scroll">
        <table id="digests">
        <caption class="visually-hidden">{{t.digestsSentHeading}}</caption>
        <thead><tr><th scope="col">{{t.digestMade}}</th><th scope="col">{{t.digestKind}}</th><th scope="col">{{t.digestPeriod}}</th><th scope="col">{{t.digestTo}}</th><th scope="col">{{t.digestStateLabel}}</th><th scope="col">{{t.digestSent}}</th></tr></thead>
        <tbody>
        {{#rows}}<tr><td class="nowrap">{{made}}</td><td>{{kind}}</td><td class="nowrap">{{period}}</td><td>{{login}} &lt;{{address}}&gt;</td><td><span class="state digest-{{state}}">{{stateLabel}}</span>{{#error}} <span class="note">{{error}}</span>{{/error}}</td><td class="nowrap">{{sent}}</td></tr>{{/rows}}
        </tbody>
        </table>
        </div>
        {{/hasRows}}
        {{^hasRows}}<p id="no-digests">{{t.digestsNone}}</p>{{/hasRows}}
        </section>
        {{/page}}{{/content}}{{/layout}}
        """

    /// A refusal or a missing page, with the layout around it.
    static let message = """
        {{<layout}}{{$content}}{{#page}}
        <p id="message">{{message}}</p>
        {{#back}}<p><a href="{{back}}">{{t.backToDashboard}}</a></p>{{/back}}
        {{/page}}{{/content}}{{/layout}}
        """

    /// Every page's template by name, and the layout.
    static let all: [String: String] = [
        "layout": layout, "sign-in": signIn, "dashboard": dashboard, "records": records, "timeline": timeline, "machines": machines,
        "policy": policy, "policy-version": policyVersion, "policy-diff": policyDiff, "people": people, "audit": audit, "message": message,
        "rooms": rooms, "room": room, "alerts": alerts, "alert": alert, "review": review, "filtering-tests": filteringTests,
        "filtering-test": filteringTest, "digests": digests,
    ]

    /// The library the pages render from, compiled once per process. The
    /// texts are constants; the tests render every page.
    static let library: MustacheLibrary = {
        var library = MustacheLibrary()
        for (name, text) in all {
            do {
                try library.register(text, named: name)
            } catch {
                fatalError("the console's \(name) template does not compile: \(error)")
            }
        }
        return library
    }()
}
