import ConciergeCore
import ConciergeStorage
@testable import ConciergeServer
import Foundation
import NIOCore
import NIOHTTP1
import NIOPosix
import Synchronization

/// The two ways a miss is answered, compared: the usual miss on the event loop
/// (``ProxyPipeline/missOnLoop(_:on:answer:)``) in one ``MissPathRig``, the same request as the
/// awaited miss (``ProxyPipeline/run(_:)`` of ``RequestPlan/LoopMiss/awaited``) in another.
/// For each request both must write the same bytes (through ``ReplyWriter``), report the same,
/// send the upstream the same requests and store the same entry.
public final class MissPathComparison: Sendable {
    /// One request of a comparison: its path, the upstream's behaviour (``MissPathScript``) and
    /// text that reaches the query, a header and the reply's body.
    public struct Request: Sendable, CustomStringConvertible {
        public var path: String
        public var kind: Int
        public var status: Int
        public var text: String
        /// A header of the client's (forwarded, or not, alike on both paths).
        public var header: (name: String, value: String)?

        public init(path: String, kind: Int, status: Int, text: String, header: (name: String, value: String)? = nil) {
            (self.path, self.kind, self.status, self.text, self.header) = (path, kind, status, text, header)
        }

        public var description: String { "\(path) k=\(kind) s=\(status) v=\(text.debugDescription) \(header.map { "\($0.name): \($0.value)" } ?? "")" }
    }

    /// The paths of ``MissPathRig``'s endpoints.
    public static let paths = ["/items", "/profile", "/tagged", "/unwrapped", "/validated", "/invalidating"]
    /// The number of upstream behaviours (``MissPathScript/Kind``).
    public static var kinds: Int { MissPathScript.Kind.allCases.count }

    private let onLoop: MissPathRig
    private let awaited: MissPathRig
    private let loop: any EventLoop
    private let counter = Atomic<Int>(0)

    public init(loop: any EventLoop) throws {
        let clock = ManualClock(start: MissPathRig.time).wallClock
        (onLoop, awaited, self.loop) = (try MissPathRig(clock: clock), try MissPathRig(clock: clock), loop)
    }

    /// The caches' writers, until ``finish()``; run them beside the comparisons.
    public func runWriters() async {
        await withTaskGroup(of: Void.self) { group in
            group.addTask { await self.onLoop.cache.run() }
            group.addTask { await self.awaited.cache.run() }
        }
    }

    /// Ends the writers (``runWriters()`` returns) and removes the files.
    public func finish() {
        onLoop.cache.finish()
        awaited.cache.finish()
    }

    public func removeFiles() {
        onLoop.removeFiles()
        awaited.removeFiles()
    }

    /// The outcome of one request: `nil` when both paths agree, else what differs. A request
    /// the plan does not send down the loop (a local answer, a key already known) compares
    /// nothing: ``Outcome/notOnLoop``.
    public enum Outcome: Sendable, Equatable {
        case same
        case notOnLoop
        case differ(String)
    }

    public func compare(_ request: Request) async -> Outcome {
        try? await onLoop.ensureSession()
        try? await awaited.ensureSession()
        // A query unique to this comparison: its key is in neither cache yet.
        let n = counter.add(1, ordering: .relaxed).newValue
        var components = URLComponents()
        components.path = request.path
        components.queryItems = [URLQueryItem(name: "k", value: String(request.kind)), URLQueryItem(name: "s", value: String(request.status)),
                                 URLQueryItem(name: "v", value: request.text), URLQueryItem(name: "n", value: String(n))]
        var headers: HTTPHeaders = ["Host": "127.0.0.1"]
        if let (name, value) = request.header { headers.add(name: name, value: value) }
        let incoming = IncomingRequest(method: "GET", target: components.percentEncodedPath + "?" + (components.percentEncodedQuery ?? ""),
                                       headers: headers, clientAddress: "127.0.0.1")
        let sentBefore = (onLoop.transport.requests.count, awaited.transport.requests.count)
        guard case .missOnLoop(let first)? = await plan(onLoop, incoming),
              case .missOnLoop(let second)? = await plan(awaited, incoming) else { return .notOnLoop }
        guard let loopAnswer = await answerOnLoop(first) else { return .differ("the loop did not take the miss") }
        let awaitedAnswer = await awaited.pipeline.run(second.awaited)
        if let difference = Self.difference(loopAnswer, awaitedAnswer) { return .differ(difference) }
        let sent = (Array(onLoop.transport.requests.dropFirst(sentBefore.0)), Array(awaited.transport.requests.dropFirst(sentBefore.1)))
        if let difference = Self.difference(sent.0, sent.1) { return .differ(difference) }
        await onLoop.cache.flush()
        await awaited.cache.flush()
        let stored = (await onLoop.cache.lookup(first.key.text), await awaited.cache.lookup(second.key.text))
        if let difference = Self.difference(stored.0, stored.1) { return .differ(difference) }
        let hot = (onLoop.cache.hotLookup(first.key.text), awaited.cache.hotLookup(second.key.text))
        if let difference = Self.difference(hot.0, hot.1) { return .differ("hot tier: " + difference) }
        return .same
    }

    /// The plan on the rig's event loop, as the listener's handler makes it.
    private func plan(_ rig: MissPathRig, _ incoming: IncomingRequest) async -> RequestPlan? {
        try? await loop.submit { rig.pipeline.plan(incoming, encoded: false) }.get()
    }

    /// The miss carried out on the loop; `nil` when it was not taken.
    private func answerOnLoop(_ miss: RequestPlan.LoopMiss) async -> ProxyAnswer? {
        let (loop, pipeline) = (self.loop, onLoop.pipeline)
        return await withCheckedContinuation { (continuation: CheckedContinuation<ProxyAnswer?, Never>) in
            loop.execute {
                let taken = pipeline.missOnLoop(miss, on: loop) { continuation.resume(returning: $0) }
                if !taken { continuation.resume(returning: nil) }
            }
        }
    }

    static func difference(_ a: ProxyAnswer, _ b: ProxyAnswer) -> String? {
        guard let bytesA = bytes(a.reply), let bytesB = bytes(b.reply) else { return "a reply that is not buffered" }
        if bytesA != bytesB {
            return "reply bytes:\n\(String(decoding: bytesA, as: UTF8.self))\n≠\n\(String(decoding: bytesB, as: UTF8.self))"
        }
        let (ra, rb) = (a.report, b.report)
        if ra.endpoint != rb.endpoint || ra.cache != rb.cache || ra.businessCode != rb.businessCode || ra.replays != rb.replays
            || ra.succeeded != rb.succeeded {
            return "reports: \(ra) ≠ \(rb)"
        }
        return nil
    }

    /// A buffered reply as the connection writes it (keep-alive HTTP/1.1).
    static func bytes(_ reply: ProxyReply) -> [UInt8]? {
        guard case .buffer(let body) = reply.body else { return nil }
        let (head, rest) = ReplyWriter.bytes(reply, body: body, version: .http1_1, isHead: false, keepAlive: true)
        return Array(head.readableBytesView) + (rest.map { Array($0.readableBytesView) } ?? [])
    }

    static func difference(_ a: [UpstreamRequest], _ b: [UpstreamRequest]) -> String? {
        func text(_ request: UpstreamRequest) -> String {
            var body = ""
            if case .bytes(let bytes) = request.body { body = String(buffer: bytes) }
            return "\(request.method) \(request.url) \(request.headers.map { "\($0.name): \($0.value)" }) \(body)"
        }
        let (ta, tb) = (a.map(text), b.map(text))
        return ta == tb ? nil : "upstream requests: \(ta) ≠ \(tb)"
    }

    static func difference(_ a: CacheEntry?, _ b: CacheEntry?) -> String? {
        func text(_ entry: CacheEntry?) -> String {
            guard let e = entry else { return "none" }
            return "\(e.key) \(e.endpoint) \(e.userID ?? "-") \(e.status) \(e.headers.map { "\($0.name): \($0.value)" }) "
                + "\(String(buffer: e.body)) \(e.storedAt) \(e.ttl) \(e.staleWhileRevalidate) \(e.staleIfError) \(e.version) \(e.tags)"
        }
        let (ta, tb) = (text(a), text(b))
        return ta == tb ? nil : "stored entries: \(ta) ≠ \(tb)"
    }
}
