@testable import FilterControl
import Foundation
import Logging
import Synchronization
import Testing
import VerdictCore

/// The filtering test on the machine: the live channel names the run it
/// answered last, judges a run it has not answered and posts the results
/// once; a refused or oversized run is not judged; a post that keeps failing
/// is given up after three.
@Suite struct FilteringTestChannelTests {
    /// A school's server with a live route answering one state (with a run
    /// beside it) and a filtering-test route answering `testStatus`.
    final class Server: SchoolTransport {
        private let state = Mutex<(live: [UInt8], testStatus: Int, livePosts: [String], testPosts: [String])>(([], 204, [], []))

        func answer(live: [UInt8], testStatus: Int) { state.withLock { $0.live = live; $0.testStatus = testStatus } }
        var livePosts: [String] { state.withLock { $0.livePosts } }
        var testPosts: [String] { state.withLock { $0.testPosts } }

        func post(_ endpoint: String, body: [UInt8]) async throws(SchoolError) -> (status: Int, body: [UInt8]) {
            state.withLock { state in
                let text = String(decoding: body, as: UTF8.self)
                switch endpoint {
                case LiveChannel.endpoint:
                    state.livePosts.append(text)
                    return (200, state.live)
                case LiveChannel.filteringTestEndpoint:
                    state.testPosts.append(text)
                    return (state.testStatus, [])
                default:
                    return (404, [])
                }
            }
        }
    }

    /// A live answer: the state of sequence 4 with `request` beside it.
    static func liveAnswer(_ request: FilteringTest.Request?) throws -> [UInt8] {
        var object = try #require(
            try JSONSerialization.jsonObject(with: Data(try LiveStateTests.envelope(sequence: 4, items: []))) as? [String: Any])
        if let request {
            object["filteringTest"] = try JSONSerialization.jsonObject(with: try JSONEncoder().encode(request))
        }
        return Array(try JSONSerialization.data(withJSONObject: object))
    }

    static let request = FilteringTest.Request(
        run: "ft-abc", groups: ["year9", FilteringTest.noGroup],
        names: [.init(name: "pokerstars.com", category: "gambling"), .init(name: "tinder.com", category: "dating")])

    /// The runs the channel asked filter-control to judge.
    final class Judged: Sendable {
        private let list = Mutex<[FilteringTest.Request]>([])
        func append(_ request: FilteringTest.Request) { list.withLock { $0.append(request) } }
        var all: [FilteringTest.Request] { list.withLock { $0 } }
    }

    static func channel(_ server: Server, judged: Judged) throws -> LiveChannel {
        LiveChannel(
            transport: server, store: LiveStateStore(path: try temporaryFolder() + "/" + LiveStateStore.fileName), machine: LiveStateTests.machine,
            context: { LiveChannel.Context(policy: try! LiveStateTests.school(), lockedCategory: { _ in nil }) }, applied: {}, report: { _ in },
            filteringTest: { request in
                judged.append(request)
                return FilteringTest.Answer(
                    run: request.run, bundleVersion: 7,
                    results: [FilteringTest.Result(group: "year9", name: "pokerstars.com", action: "block", category: "gambling", reason: "category gambling")])
            }, clock: { Date(timeIntervalSince1970: 1_500) }, logger: Logger(label: "test"))
    }

    @Test func aRunIsJudgedAndAnsweredOnceAndTheNextRequestNamesIt() async throws {
        let server = Server()
        let judged = Judged()
        let channel = try Self.channel(server, judged: judged)
        server.answer(live: try Self.liveAnswer(Self.request), testStatus: 204)
        _ = await channel.poll()
        #expect(server.livePosts.first?.contains(#""tested":"""#) == true, "the first request names no run")
        #expect(judged.all == [Self.request])
        let posted = try JSONDecoder().decode(FilteringTest.Answer.self, from: Data(try #require(server.testPosts.first).utf8))
        #expect(posted.run == "ft-abc" && posted.bundleVersion == 7 && posted.results.map(\.name) == ["pokerstars.com"])
        // The same run again (the server sent it before it had the answer): not judged or posted again.
        _ = await channel.poll()
        #expect(server.livePosts.last?.contains(#""tested":"ft-abc""#) == true)
        #expect(judged.all.count == 1 && server.testPosts.count == 1)
        // An answer without a run, and one the channel cannot take, are not judged.
        server.answer(live: try Self.liveAnswer(nil), testStatus: 204)
        _ = await channel.poll()
        var tooMany = Self.request
        tooMany.run = "ft-big"
        tooMany.names = (0...FilteringTest.maximumNames).map { .init(name: "n\($0).example", category: "games") }
        server.answer(live: try Self.liveAnswer(tooMany), testStatus: 204)
        _ = await channel.poll()
        var notAName = Self.request
        notAName.run = "ft-odd"
        notAName.names = [.init(name: "not a name", category: "games")]
        server.answer(live: try Self.liveAnswer(notAName), testStatus: 204)
        _ = await channel.poll()
        #expect(judged.all.count == 1 && server.testPosts.count == 1)
    }

    @Test func aRefusedAnswerIsNotSentAgainAndAFailingPostIsGivenUpAfterThree() async throws {
        let server = Server()
        let judged = Judged()
        let channel = try Self.channel(server, judged: judged)
        server.answer(live: try Self.liveAnswer(Self.request), testStatus: 409)
        _ = await channel.poll()
        _ = await channel.poll()
        #expect(server.testPosts.count == 1, "a 409 (answered already) is final")
        var next = Self.request
        next.run = "ft-next"
        server.answer(live: try Self.liveAnswer(next), testStatus: 503)
        for _ in 0..<5 { _ = await channel.poll() }
        #expect(server.testPosts.count == 1 + 3, "three failed posts, then no more")
        #expect(server.livePosts.last?.contains(#""tested":"ft-next""#) == true)
    }
}
