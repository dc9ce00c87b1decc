// The inspection plan (docs/inspection.md): which names are inspected and
// which spliced, and the decision on an inspected request with its search
// term, video and headers; the built-in never-inspect list and its copy in
// the code.
import Foundation
import Testing
import VerdictCore

@Suite struct InspectionPlanTests {
    func name(_ text: String) throws -> HostName { try HostName(text) }
    func patterns(_ texts: String...) throws -> [RulePattern] { try texts.map { try RulePattern($0) } }

    // MARK: The built-in list

    static let packageRoot = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent().path

    @Test func theCodeCarriesTheListFileUnchanged() throws {
        let file = try String(contentsOfFile: Self.packageRoot + "/rules/never-inspect/names", encoding: .utf8)
        #expect(NeverInspectList.builtInText + "\n" == file, "run scripts/never-inspect-swift.sh after changing rules/never-inspect/names")
    }

    @Test func everyLineOfTheBuiltInListReads() throws {
        let list = try NeverInspectList(text: NeverInspectList.builtInText)
        #expect(list == NeverInspectList.builtIn)
        let entryLines = NeverInspectList.builtInText.split(separator: "\n").filter { !$0.hasPrefix("#") && !$0.hasPrefix("[") && !$0.isEmpty }
        #expect(list.entries.count == entryLines.count && list.entries.count > 50)
        #expect(Set(list.entries.map(\.group)) == ["banking", "health-and-support", "government", "identity", "updates", "media"])
        #expect(list.entry(named: "googlevideo.com")?.group == "media")
        #expect(list.entry(named: " PayPal.com ")?.text == "paypal.com")
        #expect(list.entry(named: "update.microsoft.com") == nil, "written =update.microsoft.com")
    }

    @Test func aBrokenListNamesItsLine() {
        for (text, line) in [("paypal.com", 1), ("[banking]\n\n192.0.2.1", 3), ("[a]\nx.example\nx.example", 3), ("[a]\nexample.com/path", 2), ("[a\nx.example", 1)] {
            #expect(throws: NeverInspectList.ParseError.self) { try NeverInspectList(text: text) }
            do {
                _ = try NeverInspectList(text: text)
            } catch {
                #expect(error.line == line, "\(text)")
            }
        }
    }

    // MARK: Inspect or splice

    // MARK: A certificate that covers an inspected name

    @Test func aCertificateCoversTheInspectedNamesABrowserWouldSendOverIt() throws {
        let plan = InspectionPlan(policy: InspectionPolicy(hosts: try patterns("youtube.com", "=www.google.com", "*.example.org")))
        // Google's certificate: its wildcards cover YouTube's names and www.google.com.
        #expect(plan.inspectedName(coveredBy: ["*.google.com", "*.youtube.com", "youtube.com"]) == "www.google.com")
        #expect(plan.inspectedName(coveredBy: ["*.youtube.com"]) == InspectionPlan.certificateCheckLabel + ".youtube.com")
        #expect(plan.inspectedName(coveredBy: ["YouTube.com."]) == "youtube.com", "any case, a trailing dot")
        #expect(plan.inspectedName(coveredBy: ["*.m.youtube.com"]) != nil, "names deeper below a subtree entry")
        #expect(plan.inspectedName(coveredBy: ["*.example.org"]) != nil && plan.inspectedName(coveredBy: ["*.a.example.org"]) != nil)
        // What it does not cover.
        #expect(plan.inspectedName(coveredBy: ["mail.google.com", "*.mail.google.com", "google.com"]) == nil, "=www.google.com only")
        #expect(plan.inspectedName(coveredBy: ["example.org", "*.org", "*.com", "*"]) == nil, "*.org covers no name a browser accepts it for")
        #expect(plan.inspectedName(coveredBy: ["*.www.google.com", "w*.google.com", "www.*.com", "notyoutube.com", "*.notyoutube.com"]) == nil)
        #expect(plan.inspectedName(coveredBy: ["*.com.", "bank.example", "192.0.2.1", "", "*."]) == nil)
        #expect(plan.inspectedName(coveredBy: []) == nil)
    }

    @Test func neverInspectedNamesAndHeaderRulesCountAsThePlanCountsThem() throws {
        // A wildcard over a never-inspected subtree covers nothing inspected, even under an inspected entry.
        let plan = InspectionPlan(policy: InspectionPolicy(hosts: try patterns("google.com")))
        #expect(plan.inspectedName(coveredBy: ["*.googlevideo.com", "googlevideo.com"]) == nil, "a media CDN: never inspected")
        #expect(plan.inspectedName(coveredBy: ["accounts.google.com"]) == nil, "an identity provider: never inspected")
        #expect(plan.inspectedName(coveredBy: ["accounts.google.com", "*.google.com"]) == InspectionPlan.certificateCheckLabel + ".google.com")
        // A header rule's hosts are inspected, listed in `hosts` or not.
        let restricted = InspectionPlan(policy: InspectionPolicy(headers: RestrictHeaders(youtubeRestrict: .strict)))
        #expect(restricted.inspectedName(coveredBy: ["*.youtube.com"]) == "www.youtube.com")
        #expect(restricted.inspectedName(coveredBy: ["*.google.com"]) == nil)
        // Nothing inspected: nothing covered.
        #expect(InspectionPlan(policy: InspectionPolicy()).inspectedName(coveredBy: ["*.youtube.com", "youtube.com"]) == nil)
    }

    @Test func hostsAreInspectedAndEverythingElseSpliced() throws {
        let plan = InspectionPlan(policy: InspectionPolicy(hosts: try patterns("youtube.com", "=www.google.com", "*.example.org")))
        #expect(plan.choice(for: try name("www.youtube.com")) == .inspect)
        #expect(plan.choice(for: try name("youtube.com")) == .inspect)
        #expect(plan.choice(for: try name("www.google.com")) == .inspect)
        #expect(plan.choice(for: try name("mail.google.com")) == .splice(.notInspected))
        #expect(plan.choice(for: try name("a.example.org")) == .inspect)
        #expect(plan.choice(for: try name("example.org")) == .splice(.notInspected))
        #expect(plan.choice(for: try name("notyoutube.com")) == .splice(.notInspected))
        // Names as the wire gives them: any case, a trailing dot, Unicode.
        #expect(plan.choice(serverName: Array("WWW.YouTube.COM.".utf8)) == .inspect)
        #expect(plan.choice(serverName: Array("192.0.2.1".utf8)) == .splice(.notAName))
        #expect(plan.choice(serverName: [0xFF, 0x00]) == .splice(.notAName))
        #expect(plan.choice(serverName: [UInt8](repeating: UInt8(ascii: "a"), count: 100_000)) == .splice(.notAName))
        #expect(plan.inspectsAnything && !InspectionPlan(policy: InspectionPolicy()).inspectsAnything)
    }

    @Test func idnHostsMatchInTheirPunycodeForm() throws {
        let plan = InspectionPlan(policy: InspectionPolicy(hosts: try patterns("bücher.example")))
        #expect(plan.choice(serverName: Array("xn--bcher-kva.example".utf8)) == .inspect)
        #expect(plan.choice(serverName: Array("www.BÜCHER.example".utf8)) == .inspect)
    }

    @Test func neverInspectWinsOverHosts() throws {
        let plan = InspectionPlan(
            policy: InspectionPolicy(hosts: try patterns("google.com", "googlevideo.com", "school-bank.example"), neverInspect: try patterns("school-bank.example")))
        #expect(plan.choice(for: try name("www.google.com")) == .inspect)
        #expect(plan.choice(for: try name("accounts.google.com")) == .splice(.neverInspect(entry: "accounts.google.com", group: "identity")))
        #expect(plan.choice(for: try name("dl.google.com")) == .splice(.neverInspect(entry: "dl.google.com", group: "updates")))
        #expect(plan.choice(for: try name("rr1---sn-x.googlevideo.com")) == .splice(.neverInspect(entry: "googlevideo.com", group: "media")))
        #expect(plan.choice(for: try name("online.school-bank.example")) == .splice(.neverInspect(entry: "school-bank.example", group: "school")))
    }

    @Test func onlyAnEntryNamedExactlyLeavesTheList() throws {
        let removed = InspectionPlan(policy: InspectionPolicy(hosts: try patterns("google.com"), inspectAnyway: ["dl.google.com"]))
        #expect(removed.choice(for: try name("dl.google.com")) == .inspect)
        // A name that is not an entry removes nothing, even one below an entry.
        let below = InspectionPlan(policy: InspectionPolicy(hosts: try patterns("googlevideo.com"), inspectAnyway: ["rr1.googlevideo.com", "*.googlevideo.com"]))
        #expect(below.choice(for: try name("rr1.googlevideo.com")) == .splice(.neverInspect(entry: "googlevideo.com", group: "media")))
    }

    @Test func aHeaderRulesHostsAreInspectedEvenIdentityProviders() throws {
        let tenants = RestrictHeaders.MicrosoftTenants(allow: ["school.example"], context: "72f988bf-86f1-41af-91ab-2d7cd011db47")
        let plan = InspectionPlan(policy: InspectionPolicy(headers: RestrictHeaders(youtubeRestrict: .strict, googleAllowedDomains: ["school.example"], microsoftTenants: tenants)))
        for host in ["www.youtube.com", "m.youtube.com", "youtubei.googleapis.com", "youtube.googleapis.com", "www.youtube-nocookie.com",
                     "login.microsoftonline.com", "login.microsoft.com", "login.windows.net", "accounts.google.com", "www.google.com", "google.com"] {
            #expect(plan.choice(for: try name(host)) == .inspect, "\(host)")
        }
        // Not other names of the same services, and never-inspect entries outside the identity group stay.
        #expect(plan.choice(for: try name("music.youtube.com")) == .splice(.notInspected))
        #expect(plan.choice(for: try name("login.live.com")) == .splice(.neverInspect(entry: "login.live.com", group: "identity")))
        #expect(plan.choice(for: try name("dl.google.com")) == .splice(.neverInspect(entry: "dl.google.com", group: "updates")))
        // The school's own never-inspect entries win over a header rule too.
        let school = InspectionPlan(policy: InspectionPolicy(headers: RestrictHeaders(microsoftTenants: tenants), neverInspect: try patterns("microsoftonline.com")))
        #expect(school.choice(for: try name("login.microsoftonline.com")) == .splice(.neverInspect(entry: "microsoftonline.com", group: "school")))
    }

    // MARK: Headers

    @Test func eachHeaderGoesOnlyToItsHosts() throws {
        let tenants = RestrictHeaders.MicrosoftTenants(allow: ["school.example", "school.onmicrosoft.com"], context: "72f988bf-86f1-41af-91ab-2d7cd011db47")
        let headers = RestrictHeaders(youtubeRestrict: .moderate, googleAllowedDomains: ["school.example", "staff.school.example"], microsoftTenants: tenants)
        #expect(headers.fields(for: try name("www.youtube.com")) == [HeaderField(name: "YouTube-Restrict", value: "Moderate")])
        #expect(headers.fields(for: try name("music.youtube.com")) == [])
        #expect(headers.fields(for: try name("mail.google.com")) == [HeaderField(name: "X-GoogApps-Allowed-Domains", value: "school.example,staff.school.example")])
        #expect(headers.fields(for: try name("google.com.evil.example")) == [])
        #expect(headers.fields(for: try name("login.windows.net")) == [
            HeaderField(name: "Restrict-Access-To-Tenants", value: "school.example,school.onmicrosoft.com"),
            HeaderField(name: "Restrict-Access-Context", value: "72f988bf-86f1-41af-91ab-2d7cd011db47"),
        ])
        #expect(RestrictHeaders(youtubeRestrict: .strict).fields(for: try name("m.youtube.com")).map(\.description) == ["YouTube-Restrict: Strict"])
        #expect(RestrictHeaders.isGUID("72f988bf-86f1-41af-91ab-2d7cd011db47") && !RestrictHeaders.isGUID("72f988bf-86f1-41af-91ab") && !RestrictHeaders.isGUID("school.example"))
    }

    // MARK: The interception CA's names

    @Test func theCAsNamesCoverEveryInspectedNameOnce() throws {
        let top = InspectionPolicy(hosts: [try RulePattern("youtube.com"), try RulePattern("=www.google.com"), try RulePattern("*.example.org")])
        // A group's own hosts, one below another's, and a header rule's hosts.
        let group = InspectionPolicy(hosts: [try RulePattern("m.youtube.com"), try RulePattern("bing.com")], headers: RestrictHeaders(youtubeRestrict: .strict))
        #expect(InspectionPlan.constraintNames([top, group, InspectionPolicy()]) == [
            "bing.com", "example.org", "www.google.com", "www.youtube-nocookie.com", "youtube.com", "youtube.googleapis.com", "youtubei.googleapis.com",
        ])
        #expect(InspectionPlan.constraintNames([InspectionPolicy()]).isEmpty, "nothing inspected: no CA")
    }

    // MARK: Requests

    /// YouTube in category `video` (blocked), a games site with a UT1-style URL entry, and a news site that is allowed.
    func engine(policy: Policy = Policy(blockedCategories: .only(["video", "games"]))) throws -> VerdictEngine<InMemoryRules> {
        var rules = InMemoryRules()
        try rules.add("youtube.com", "video")
        try rules.add("youtu.be", "video")
        try rules.add("sites.google.com/site/classroom6x", "games")
        try rules.add("news.example", "news")
        try rules.add("news.example/games/", "games")
        return VerdictEngine(rules: rules, policy: policy)
    }

    func decide(_ plan: InspectionPlan, _ host: String, _ target: String, engine: VerdictEngine<InMemoryRules>) -> InspectedDecision {
        plan.decide(InspectedRequest(host: host, target: target), engine: engine)
    }

    @Test func urlRulesApplyOnInspectedHostsUnlessTurnedOff() throws {
        let engine = try engine()
        let on = InspectionPlan(policy: InspectionPolicy(hosts: try patterns("google.com", "news.example")))
        let blocked = decide(on, "sites.google.com", "/site/classroom6x/play?x=1", engine: engine)
        #expect(blocked.decision == Decision(.drop, Reason(source: .category, category: "games", rule: "sites.google.com/site/classroom6x")))
        #expect(decide(on, "sites.google.com", "/site/maths", engine: engine).decision.verdict == .allow, "the host is not blocked")
        // Hiding the path from a prefix: escapes of unreserved characters, dot segments, upper case.
        for target in ["/site/%63lassroom6x", "/site/x/../classroom6x", "/site/./classroom6x", "/SITE/Classroom6x", "/site/classroom6%78/"] {
            #expect(decide(on, "sites.google.com", target, engine: engine).decision.verdict == .drop, "\(target)")
        }
        #expect(decide(on, "news.example", "/games/chess", engine: engine).decision.reason.category == "games")
        let off = InspectionPlan(policy: InspectionPolicy(hosts: try patterns("google.com", "news.example"), urls: false))
        #expect(decide(off, "sites.google.com", "/site/classroom6x/play", engine: engine).decision.verdict == .allow)
        #expect(decide(off, "news.example", "/games/chess", engine: engine).decision == Decision(.allow, Reason(source: .category, category: "news", rule: "news.example")))
        // The policy's own URL prefixes stay with urls: false.
        let own = try self.engine(policy: Policy(blockedCategories: .only(["video", "games"]), deny: try patterns("news.example/private")))
        #expect(decide(off, "news.example", "/private/x", engine: own).decision.reason.source == .localDenyList)
    }

    @Test func aHostThatIsNoNameIsBlocked() throws {
        let engine = try engine()
        let plan = InspectionPlan(policy: InspectionPolicy(hosts: try patterns("news.example")))
        for host in ["", "[2001:db8::1]:443", "a b", "news.example:99999999", String(repeating: "a", count: 5000)] {
            let result = decide(plan, host, "/", engine: engine)
            #expect(result.decision.verdict == .drop && result.decision.reason.source == .inspectBlock && result.headers.isEmpty, "\(host)")
        }
        #expect(decide(plan, "NEWS.Example.:443", "/", engine: engine).decision.verdict == .allow)
    }

    @Test func anAllowedVideoOpensABlockedYouTubeForItsPageOnly() throws {
        let engine = try engine()
        let video = "dQw4w9WgXcQ"
        let plan = InspectionPlan(policy: InspectionPolicy(hosts: try patterns("youtube.com", "youtu.be"), youtube: YouTubeLists(allowVideos: [video])))
        for (host, target) in [("www.youtube.com", "/watch?v=\(video)"), ("m.youtube.com", "/watch?feature=share&v=\(video)"), ("www.youtube.com", "/shorts/\(video)"),
                               ("www.youtube.com", "/embed/\(video)?rel=0"), ("youtu.be", "/\(video)?si=x"), ("www.youtube.com", "/watch?v=%64Qw4w9WgXcQ"),
                               ("www.youtube.com", "/watch?v=\(video)&v=\(video)"), ("www.youtube.com", "/live/\(video)")] {
            let result = decide(plan, host, target, engine: engine)
            #expect(result.decision == Decision(.allow, Reason(source: .inspectAllow, category: "youtube.allowVideos", rule: video)), "\(host)\(target)")
        }
        // The player's own requests go with it; the rest of the site stays blocked.
        #expect(decide(plan, "www.youtube.com", "/s/player/abc/base.js", engine: engine).decision.reason.category == "youtube.player")
        #expect(decide(plan, "www.youtube.com", "/youtubei/v1/player?key=x", engine: engine).decision.verdict == .allow)
        #expect(decide(plan, "www.youtube.com", "/s/\u{0301}player.js", engine: engine).decision.reason.category == "youtube.player", "bytes, not characters")
        for target in ["/", "/watch?v=aaaaaaaaaaa", "/watch", "/watch?v=", "/watch?v=\(video)&v=aaaaaaaaaaa", "/watch?v=\(video)&v=short",
                       "/results?search_query=x", "/embed/videoseries?list=PL1", "/feed/trending", "/shorts/\(video)?v=aaaaaaaaaaa",
                       "/watch?V=\(video)"] {
            let result = decide(plan, "www.youtube.com", target, engine: engine)
            #expect(result.decision == Decision(.drop, Reason(source: .category, category: "video", rule: "youtube.com")), "\(target)")
        }
    }

    @Test func aBlockedVideoOrChannelIsBlockedOnAnAllowedYouTube() throws {
        let engine = try engine(policy: Policy(blockedCategories: .only(["games"])))
        let lists = YouTubeLists(blockVideos: ["aaaaaaaaaaa"], blockChannels: ["UCaaaaaaaaaaaaaaaaaaaaaa", "@badchannel"])
        let plan = InspectionPlan(policy: InspectionPolicy(hosts: try patterns("youtube.com", "youtu.be"), youtube: lists))
        for (host, target, category, rule) in [
            ("www.youtube.com", "/watch?v=aaaaaaaaaaa", "youtube.blockVideos", "aaaaaaaaaaa"),
            ("www.youtube.com", "/watch?v=bbbbbbbbbbb&v=aaaaaaaaaaa", "youtube.blockVideos", "aaaaaaaaaaa"),
            ("youtu.be", "/aaaaaaaaaaa", "youtube.blockVideos", "aaaaaaaaaaa"),
            ("www.youtube-nocookie.com", "/embed/aaaaaaaaaaa", "youtube.blockVideos", "aaaaaaaaaaa"),
            ("www.youtube.com", "/%73horts/aaaaaaaaaaa", "youtube.blockVideos", "aaaaaaaaaaa"),
            ("www.youtube.com", "/channel/UCaaaaaaaaaaaaaaaaaaaaaa/videos", "youtube.blockChannels", "UCaaaaaaaaaaaaaaaaaaaaaa"),
            ("www.youtube.com", "/@BadChannel", "youtube.blockChannels", "@badchannel"),
            ("m.youtube.com", "/@badchannel/shorts", "youtube.blockChannels", "@badchannel"),
        ] {
            let result = decide(plan, host, target, engine: engine)
            #expect(result.decision == Decision(.drop, Reason(source: .inspectBlock, category: category, rule: rule)), "\(host)\(target)")
        }
        for target in ["/watch?v=bbbbbbbbbbb", "/@goodchannel", "/channel/UCbbbbbbbbbbbbbbbbbbbbbb", "/watch?vv=aaaaaaaaaaa"] {
            #expect(decide(plan, "www.youtube.com", target, engine: engine).decision.verdict == .allow, "\(target)")
        }
        // A video ID is case-sensitive.
        #expect(decide(plan, "www.youtube.com", "/watch?v=AAAAAAAAAAA", engine: engine).decision.verdict == .allow)
        // More video parameters than are read: blocked while anything is on blockVideos.
        let many = (0..<40).map { "v=" + String(format: "%011d", $0) }.joined(separator: "&")
        #expect(decide(plan, "www.youtube.com", "/watch?" + many, engine: engine).decision.reason.source == .inspectBlock)
    }

    @Test func examsOverridesAndBypassRulesStandOverTheYouTubeLists() throws {
        let video = "dQw4w9WgXcQ"
        let plan = InspectionPlan(policy: InspectionPolicy(hosts: try patterns("youtube.com"), youtube: YouTubeLists(allowVideos: [video], blockVideos: ["aaaaaaaaaaa"])))
        var exam = Policy(blockedCategories: .only(["video"]))
        exam.exam = Policy.Exam(allow: try patterns("exams.example"))
        #expect(decide(plan, "www.youtube.com", "/watch?v=\(video)", engine: try engine(policy: exam)).decision.reason.source == .exam)
        var blockedByTeacher = Policy(blockedCategories: .only([]))
        blockedByTeacher.overrideBlock = try patterns("youtube.com")
        #expect(decide(plan, "www.youtube.com", "/watch?v=\(video)", engine: try engine(policy: blockedByTeacher)).decision.reason.source == .overrideBlock)
        var allowedByTeacher = Policy(blockedCategories: .only(["video"]))
        allowedByTeacher.overrideAllow = try patterns("youtube.com")
        #expect(decide(plan, "www.youtube.com", "/watch?v=aaaaaaaaaaa", engine: try engine(policy: allowedByTeacher)).decision.reason.source == .overrideAllow)
        // The school's allow list is a list: a video on blockVideos is more specific.
        let allowList = Policy(blockedCategories: .only(["video"]), allow: try patterns("youtube.com"))
        #expect(decide(plan, "www.youtube.com", "/watch?v=aaaaaaaaaaa", engine: try engine(policy: allowList)).decision.reason.source == .inspectBlock)
        // With unknown: ask, an allowed video needs no answer.
        var rules = InMemoryRules()
        try rules.add("games.example", "games")
        let ask = VerdictEngine(rules: rules, policy: Policy(unknown: .ask))
        #expect(decide(plan, "www.youtube.com", "/watch?v=\(video)", engine: ask).decision.verdict == .allow)
        #expect(decide(plan, "www.youtube.com", "/", engine: ask).decision.verdict == .needRules)
    }

    @Test func anAllowedChannelOpensItsPages() throws {
        let plan = InspectionPlan(policy: InspectionPolicy(hosts: try patterns("youtube.com"), youtube: YouTubeLists(allowChannels: ["@mathsclass", "UCbbbbbbbbbbbbbbbbbbbbbb"])))
        let engine = try engine()
        #expect(decide(plan, "www.youtube.com", "/@MathsClass/videos", engine: engine).decision.reason.category == "youtube.allowChannels")
        #expect(decide(plan, "www.youtube.com", "/channel/UCbbbbbbbbbbbbbbbbbbbbbb", engine: engine).decision.verdict == .allow)
        #expect(decide(plan, "www.youtube.com", "/@otherclass", engine: engine).decision.verdict == .drop)
        #expect(decide(plan, "www.youtube.com", "/channel/UCbbbbbbbbbbbbbbbbbbbbbbX", engine: engine).decision.verdict == .drop)
    }

    @Test func searchTermsAreReadDecodedAndBounded() throws {
        let engine = try engine(policy: Policy(blockedCategories: .only([])))
        let plan = InspectionPlan(policy: InspectionPolicy(hosts: try patterns("google.com", "www.google.co.uk", "bing.com", "duckduckgo.com", "youtube.com"), searchTerms: true))
        for (host, target, engineName, terms) in [
            ("www.google.com", "/search?q=how+to+tie+a+knot&hl=en", SearchEngine.google, ["how to tie a knot"]),
            ("www.google.co.uk", "/search?client=firefox&q=caf%C3%A9%20prices", .google, ["café prices"]),
            ("www.bing.com", "/search?q=a%2Bb&form=QBLH", .bing, ["a+b"]),
            ("www.bing.com", "/images/search?q=cats", .bing, ["cats"]),
            ("duckduckgo.com", "/?q=weather&ia=web", .duckduckgo, ["weather"]),
            ("html.duckduckgo.com", "/html/?q=news", .duckduckgo, ["news"]),
            ("www.youtube.com", "/results?search_query=lofi+beats", .youtube, ["lofi beats"]),
            ("www.google.com", "/search?q=first&q=second&q=first", .google, ["first", "second"]),
            ("www.google.com", "/search?q=100%&q=%zz%4", .google, ["100%", "%zz%4"]),
            ("www.google.com", "/search?q=%FF%FE", .google, ["\u{FFFD}\u{FFFD}"]),
            ("www.google.com", "/search?q=a%0D%0Ab%00c%E2%80%AEd", .google, ["a b c d"]),
            ("www.google.com", "/search?%71=encoded+key", .google, ["encoded key"]),
            ("www.google.com", "/search?q=&q=+++", .google, []),
            ("WWW.GOOGLE.COM.", "/search?q=Upper", .google, ["Upper"]),
        ] {
            let result = decide(plan, host, target, engine: engine)
            #expect(result.analysis.searchEngine == engineName && result.searchTerms == terms, "\(host)\(target): \(result.searchTerms)")
        }
        // Not a search: other paths, other hosts, other keys.
        for (host, target) in [("www.google.com", "/maps?q=x"), ("www.google.com", "/complete/search?q=x"), ("www.google.evil.example", "/search?q=x"),
                               ("www.bing.com", "/news?q=x"), ("duckduckgo.com", "/ac/?q=x"), ("www.youtube.com", "/results?q=x")] {
            #expect(decide(plan, host, target, engine: engine).searchTerms.isEmpty, "\(host)\(target)")
        }
        // Bounded: at most four terms of at most 256 bytes, from any length of query.
        let huge = "/search?" + (0..<10_000).map { "q=term\($0)" }.joined(separator: "&")
        #expect(decide(plan, "www.google.com", huge, engine: engine).searchTerms == ["term0", "term1", "term2", "term3"])
        let long = decide(plan, "www.google.com", "/search?q=" + String(repeating: "%C3%A9", count: 100_000), engine: engine).searchTerms
        #expect(long.count == 1 && long[0].utf8.count == 256 && long[0].allSatisfy { $0 == "é" })
        // Captured only when the policy says so (and then blocked searches are captured too).
        let silent = InspectionPlan(policy: InspectionPolicy(hosts: try patterns("google.com")))
        #expect(decide(silent, "www.google.com", "/search?q=x", engine: engine).searchTerms.isEmpty)
        let blocked = try self.engine(policy: Policy(blockedCategories: .only([]), deny: try patterns("www.google.com/search")))
        let result = decide(plan, "www.google.com", "/search?q=blocked+search", engine: blocked)
        #expect(result.decision.verdict == .drop && result.searchTerms == ["blocked search"])
    }

    @Test func headersGoWithAllowedRequestsOnly() throws {
        let plan = InspectionPlan(policy: InspectionPolicy(youtube: YouTubeLists(blockVideos: ["aaaaaaaaaaa"]), headers: RestrictHeaders(youtubeRestrict: .strict)))
        let engine = try engine(policy: Policy(blockedCategories: .only([])))
        #expect(decide(plan, "www.youtube.com", "/watch?v=bbbbbbbbbbb", engine: engine).headers == [HeaderField(name: "YouTube-Restrict", value: "Strict")])
        #expect(decide(plan, "www.youtube.com", "/watch?v=aaaaaaaaaaa", engine: engine).headers.isEmpty)
    }

    @Test func theRecordGetsTheURL() throws {
        let plan = InspectionPlan(policy: InspectionPolicy(hosts: try patterns("news.example")))
        let result = decide(plan, "News.Example", "/a/./b/../c?x=%41", engine: try engine())
        #expect(result.analysis.url == "https://news.example/a/c?x=%41")
        #expect(RequestAnalysis(InspectedRequest(host: "news.example", target: "https://news.example:443/p?q=1")).path == "/p?q=1")
        #expect(RequestAnalysis(InspectedRequest(host: "news.example", target: "https://news.example?q=1")).path == "/?q=1")
        #expect(RequestAnalysis(InspectedRequest(host: "news.example", target: "*")).path == nil)
        #expect(RequestAnalysis(InspectedRequest(host: "news.example", target: "/#frag")).path == "/")
        // Decoding makes no new escape: read again, the path stays the same.
        for (target, path) in [("/s%%4%42=z", "/s%%4%42=z"), ("/%%34%31", "/%%341"), ("/%25%34%31", "/%2541"), ("/cl%61ss", "/class")] {
            let once = RequestAnalysis(InspectedRequest(host: "news.example", target: target)).path
            #expect(once == path, "\(target)")
            #expect(RequestAnalysis(InspectedRequest(host: "news.example", target: once ?? "")).path == once, "\(target)")
        }
        let long = RequestAnalysis(InspectedRequest(host: "news.example", target: "/" + String(repeating: "a", count: 100_000)))
        #expect(long.path?.utf8.count == RequestAnalysis.maximumPathBytes && long.url!.utf8.count == 2048)
        // Cut between characters, never inside one (which would make U+FFFD and more bytes).
        let wide = RequestAnalysis(InspectedRequest(host: "news.example", target: "/" + String(repeating: "é", count: 10_000)))
        #expect(wide.path.map { $0.utf8.count <= RequestAnalysis.maximumPathBytes && !$0.contains("\u{FFFD}") } == true)
        #expect(wide.url.map { $0.utf8.count <= 2048 && !$0.contains("\u{FFFD}") } == true)
    }

    @Test func hostileTargetsNeverTrap() throws {
        let plan = InspectionPlan(policy: InspectionPolicy(hosts: try patterns("youtube.com", "google.com"), youtube: YouTubeLists(allowVideos: ["dQw4w9WgXcQ"]), searchTerms: true))
        let engine = try engine()
        let targets = [
            "", "/", "?", "/?", "/?&&&", "/watch?v", "/watch?=", "/watch?v=%", "/watch?v=%4", "/watch?v=%%%%", "/search?q=%", "/search?q=%e",
            "/..", "/../../..", "/./.", "//", "/%2e%2e/%2E%2E/watch?v=dQw4w9WgXcQ", "/" + String(repeating: "../", count: 10_000),
            "/watch?" + String(repeating: "&", count: 100_000), "/" + String(repeating: "%", count: 50_000), "http://", "https://x",
            "/\u{0}\u{7F}\u{FF}", "/@", "/@" + String(repeating: "x", count: 10_000), "/channel/", "/shorts/", "/embed//",
        ]
        for target in targets {
            _ = decide(plan, "www.youtube.com", target, engine: engine)
            _ = decide(plan, "www.google.com", target, engine: engine)
        }
        let binary = InspectedRequest(method: [0xFF], host: [0xC3, 0x28], target: [0x2F, 0xC3, 0x28, 0x3F, 0x71, 0x3D, 0xF0, 0x9F])
        #expect(plan.decide(binary, engine: engine).decision.verdict == .drop)
        // `..` past the root stays at the root, as RFC 3986 removes it.
        #expect(decide(plan, "www.youtube.com", "/%2e%2e/%2E%2E/watch?v=dQw4w9WgXcQ", engine: engine).decision.verdict == .allow)
    }

    // MARK: The school's policy

    @Test func aGroupReplacesTheTopLevelsKeysOneByOne() throws {
        let top = InspectKeys(hosts: try patterns("youtube.com"), youtube: YouTubeLists(allowVideos: ["dQw4w9WgXcQ"]), searchTerms: true,
                              neverInspect: try patterns("bank.example"))
        let school = SchoolPolicy(
            groups: [
                PolicyGroup(name: "staff", members: GroupMembers(unixGroups: ["staff"]), policy: PolicyLevel(inspect: InspectKeys(hosts: try patterns("google.com")))),
                PolicyGroup(name: "guests", members: GroupMembers(unixGroups: ["guests"]), policy: PolicyLevel(inspect: .nothing)),
            ],
            topLevel: PolicyLevel(inspect: top), systemUsers: "staff")
        let staff = school.inspection(for: .group("staff"))
        let google = try patterns("google.com")
        let bank = try patterns("bank.example")
        let youtube = try patterns("youtube.com")
        #expect(staff.hosts == google && staff.searchTerms && staff.youtube.allowVideos == ["dQw4w9WgXcQ"] && staff.neverInspect == bank)
        #expect(school.inspection(for: .ungrouped).hosts == youtube)
        #expect(school.inspection(for: .system) == staff)
        #expect(!school.inspectionPlan(for: .group("guests")).inspectsAnything)
        #expect(school.inspectionPlan(for: .group("nobody-knows")).choice(for: try name("www.youtube.com")) == .inspect)
    }
}
