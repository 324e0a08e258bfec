import ConciergeCore
import NIOCore
import NIOHTTP1
import NIOPosix
import Synchronization

/// What preparing a cacheable `GET` gave (its cache key and endpoint), remembered so that a
/// repeated hit skips ``PreparedRequest/prepare(_:route:session:)`` (query parsing, common
/// params, scope, key building): a fifth of a hit's instructions.
///
/// Sound because preparing is a pure function of the method, the target, the headers, the
/// body, the route (configuration generation and environment) and the session. A recipe is
/// used only when all of them are the very same: the request has no body, its method, target
/// and headers are equal byte for byte, the configuration is the same object (a reload makes
/// a new one; the recipe holds it, so its identity cannot be reused), and the environment and
/// the session are equal. The memo is consulted for hits alone: when the recipe's entry is not
/// fresh in the hot tier the request takes the full path.
///
/// Each thread (event loop) has its own memo (``HitMemos``), of at most ``capacity`` recipes,
/// emptied when full. It also keeps, as many at most, the bytes of request heads answered
/// through a recipe (``Replay``), which ``RepeatedHitHandler`` recognises without parsing.
final class HitMemo: Sendable {
    static let capacity = 1024
    /// Longer targets or more header bytes are not remembered.
    static let maxProbeBytes = 4096

    struct Recipe: Sendable {
        let config: RuntimeConfig
        let environment: String
        let session: SessionTokens?
        /// The live session (or `per_client` instance) `session` was read from: a replayed hit
        /// compares its tokens now (``ProxyPipeline/replayedHit(of:listenerSession:)``); `nil`
        /// for a pipeline without a registry (its own session).
        let unit: SessionUnit?
        let key: HashedKey
        let endpoint: EndpointPolicy

        /// Whether it was made under this very configuration object, environment and session.
        func holds(config: RuntimeConfig, environment: String, session: SessionTokens?) -> Bool {
            self.config === config && self.environment == environment && self.session == session
        }
    }

    /// The request as preparing reads it (a body is excluded by the callers), and the live
    /// session chosen for it.
    struct Probe: Hashable, Sendable {
        let method: String
        let target: String
        let headers: HTTPHeaders
        /// The live session or `per_client` instance the request chose (``SessionSlot``'s
        /// identity); `nil` without a registry.
        let slot: ObjectIdentifier?

        init(_ incoming: IncomingRequest, slot: (any SessionSlot)?) {
            (method, target, headers) = (incoming.method, incoming.target, incoming.headers)
            self.slot = slot.map { ObjectIdentifier($0) }
        }

        static func == (a: Probe, b: Probe) -> Bool {
            a.slot == b.slot && a.method == b.method && a.target == b.target
                && a.headers.elementsEqual(b.headers) { $0.name == $1.name && $0.value == $1.value }
        }

        /// The target, method and session only: a probe is hashed for every `GET` (a miss too),
        /// and two requests differing only in headers are told apart by `==` in the bucket. The
        /// session spreads the requests of many `per_client` instances (the same URLs, told
        /// apart by the id header alone) over buckets: else each lookup compared the headers of
        /// up to ``capacity`` of them.
        func hash(into hasher: inout Hasher) {
            hasher.combine(target)
            hasher.combine(method)
            hasher.combine(headers.count)
            hasher.combine(slot)
        }
    }

    // A Mutex although each memo is used by one thread: it makes the memo Sendable, and an
    // uncontended lock costs a few instructions.
    private let recipes = Mutex<[Probe: Recipe]>([:])

    /// The recipe for this request, if the same request was prepared under the same route and session.
    func recipe(for incoming: IncomingRequest, route: PreparedRequest.Route, session: SessionTokens?, slot: (any SessionSlot)? = nil) -> Recipe? {
        // The header bytes are counted when a recipe is remembered, not for every lookup: a
        // probe too large to remember matches none (it is compared only with remembered ones).
        guard Self.eligible(incoming, countingHeaderBytes: false) else { return nil }
        let probe = Probe(incoming, slot: slot)
        guard let recipe = recipes.withLock({ $0[probe] }), recipe.holds(config: route.config, environment: route.environment, session: session) else {
            return nil
        }
        return recipe
    }

    /// Remembers the recipe of a request; returns it (`nil` when the request is not remembered).
    @discardableResult
    func remember(_ incoming: IncomingRequest, route: PreparedRequest.Route, session: SessionTokens?, unit: SessionUnit? = nil,
                  key: HashedKey, endpoint: EndpointPolicy) -> Recipe? {
        guard Self.eligible(incoming) else { return nil }
        let probe = Probe(incoming, slot: unit)
        let recipe = Recipe(config: route.config, environment: route.environment, session: session, unit: unit, key: key, endpoint: endpoint)
        recipes.withLock { recipes in
            if recipes.count >= Self.capacity { recipes.removeAll(keepingCapacity: true) }
            recipes[probe] = recipe
        }
        return recipe
    }

    var count: Int { recipes.withLock { $0.count } }

    // MARK: - Requests recognised by their bytes

    /// A request head that arrived alone in one read, was parsed and checked, and was answered
    /// from the hot tier through ``recipe``: the same bytes again are the same request
    /// (``RepeatedHitHandler``), answered without parsing them.
    ///
    /// A class: a repeated hit reads it out of the memo's lock and through the checks as one
    /// reference, where the struct (the request, the recipe) was copied at each step.
    final class Replay: Sendable {
        /// The head's bytes, copied (a slice would keep the whole read buffer).
        let bytes: ByteBuffer
        /// The request as the checks left it (for the request log).
        let incoming: IncomingRequest
        let recipe: Recipe

        init(bytes: ByteBuffer, incoming: IncomingRequest, recipe: Recipe) {
            (self.bytes, self.incoming, self.recipe) = (bytes, incoming, recipe)
        }
    }

    /// Keyed by a quick hash of the bytes (``quickHash(_:)``); a match is compared byte for
    /// byte, so bytes that collide are only a replay not found (the later one replaces the
    /// earlier), never a wrong answer. Every read of a request head is hashed: a miss too.
    private let replays = Mutex<[Int: Replay]>([:])

    /// The replay remembered for exactly these bytes.
    func replay(for bytes: ByteBuffer) -> Replay? {
        guard bytes.readableBytes <= Self.maxProbeBytes else { return nil }
        let hash = Self.hash(bytes)
        guard let replay = replays.withLock({ $0[hash] }), replay.bytes == bytes else { return nil }
        return replay
    }

    func rememberReplay(_ bytes: ByteBuffer, incoming: IncomingRequest, recipe: Recipe) {
        guard bytes.readableBytes <= Self.maxProbeBytes, case .buffered(let body) = incoming.body, body.readableBytes == 0 else { return }
        var incoming = incoming
        incoming.clientAddress = nil
        let replay = Replay(bytes: ByteBuffer(bytes: bytes.readableBytesView), incoming: incoming, recipe: recipe)
        let hash = Self.hash(bytes)
        replays.withLock { replays in
            if replays.count >= Self.capacity { replays.removeAll(keepingCapacity: true) }
            replays[hash] = replay
        }
    }

    private static func hash(_ bytes: ByteBuffer) -> Int {
        bytes.withUnsafeReadableBytes { quickHash($0) }
    }

    /// Eight bytes at a time, multiplied and rotated in, then the rest and the length: a few
    /// instructions a word (SipHash costs ~10 a byte). Not keyed: the dictionary hashes the
    /// `Int` again with the process's seed, and a collision costs a replay, not a lookup chain.
    static func quickHash(_ bytes: UnsafeRawBufferPointer) -> Int {
        var h: UInt64 = 0x9E37_79B9_7F4A_7C15 ^ UInt64(bytes.count)
        var i = 0
        while i + 8 <= bytes.count {
            let word = bytes.loadUnaligned(fromByteOffset: i, as: UInt64.self)
            h = ((h ^ word) &* 0xFF51_AFD7_ED55_8CCD)
            h = (h << 29) | (h >> 35)
            i += 8
        }
        var tail: UInt64 = 0
        var shift: UInt64 = 0
        while i < bytes.count {
            tail |= UInt64(bytes[i]) << shift
            shift += 8
            i += 1
        }
        h = (h ^ tail) &* 0xC4CE_B9FE_1A85_EC53
        return Int(bitPattern: UInt(h ^ (h >> 33)))
    }

    private static func eligible(_ incoming: IncomingRequest, countingHeaderBytes: Bool = true) -> Bool {
        guard !incoming.isSubRequest, incoming.target.utf8.count <= maxProbeBytes else { return false }
        switch incoming.body {
        case .buffered(let body) where body.readableBytes > 0: return false
        case .buffered: break
        case .stream: return false
        }
        guard countingHeaderBytes else { return true }
        var bytes = 0
        for (name, value) in incoming.headers { bytes += name.utf8.count + value.utf8.count }
        return bytes <= maxProbeBytes
    }
}

/// One ``HitMemo`` per thread for one pipeline: the event loops each use their own.
final class HitMemos: Sendable {
    private let perThread = ThreadSpecificVariable<HitMemo>()

    var current: HitMemo {
        if let memo = perThread.currentValue { return memo }
        let memo = HitMemo()
        perThread.currentValue = memo
        return memo
    }
}
