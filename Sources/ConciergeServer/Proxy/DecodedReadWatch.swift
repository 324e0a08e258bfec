import ConciergeCore
import NIOCore
import NIOHTTP1

/// What the request decoder delivered from one read that ``RepeatedHitHandler`` handed to it,
/// and the hit answered for it: one per connection, made with its pipeline and shared by the two
/// handlers on either side of the decoder (on the connection's loop only).
///
/// ``RepeatedHitHandler`` opens a watch before a read goes on (``begin()``) and closes it after
/// (``end(_:)``): was the decoder given exactly one request without a body, so that it is between
/// requests again? ``ProxyHTTPHandler`` reports what reaches it meanwhile (``count(_:)``,
/// ``errorSeen()``, ``hitAnswered(_:recipe:)``). Plain counts, checked on every request: not a
/// handler of its own behind the decoder, which would cost every part a hop and a dynamic cast.
final class DecodedReadWatch {
    /// What arrived during one watched read.
    struct Counts {
        var watching = false
        var heads = 0
        var ends = 0
        /// Body parts, errors, and heads after which the decoder reads no next request.
        var others = 0
        var hits = 0
    }

    /// Keeps a read's bytes with the hit answered for it (``ProxyResponder/rememberReplay(_:incoming:recipe:)``).
    private let remember: (ByteBuffer, IncomingRequest, HitMemo.Recipe) -> Void
    /// The read the decoder is given, while it reads it: what a parser error is judged by
    /// (``RequestHeadCheck/refined(_:read:)``).
    var input: ByteBuffer?
    private(set) var counts = Counts()
    /// The hit answered during the watched read, when the hit memo keeps its recipe.
    private var answeredHit: (incoming: IncomingRequest, recipe: HitMemo.Recipe)?

    init(remember: @escaping (ByteBuffer, IncomingRequest, HitMemo.Recipe) -> Void) {
        self.remember = remember
    }

    /// A watch that remembers reads with `responder`.
    convenience init(responder: any ProxyResponder) {
        self.init { responder.rememberReplay($0, incoming: $1, recipe: $2) }
    }

    /// Before a read goes to the request decoder (or its plain head past it): what arrives is
    /// counted until ``end(_:)``.
    func begin() {
        counts = Counts(watching: true)
    }

    /// A part reached the proxy handler.
    func count(_ part: HTTPServerRequestPart) {
        guard counts.watching else { return }
        switch part {
        case .head(let head):
            counts.heads += 1
            if !RequestHeadBoundary.decodingGoesOn(after: head) { counts.others += 1 }
        case .body: counts.others += 1
        case .end: counts.ends += 1
        }
    }

    /// An error reached the proxy handler.
    func errorSeen() {
        if counts.watching { counts.others += 1 }
    }

    /// The proxy handler wrote a hit as ready bytes (`recipe`: the thread's hit memo keeps one
    /// for the request).
    func hitAnswered(_ incoming: IncomingRequest, recipe: HitMemo.Recipe?) {
        guard counts.watching else { return }
        counts.hits += 1
        // Never a traced request's bytes: its `traceparent` is read each time.
        answeredHit = incoming.trace == nil ? recipe.map { (incoming, $0) } : nil
    }

    /// After a read went on: whether it delivered exactly one request without a body and
    /// nothing else. If that request was answered as a remembered hit, the read's `bytes`
    /// (`nil`: not to be remembered) are remembered with it
    /// (``remember``).
    func end(_ bytes: ByteBuffer?) -> Bool {
        let seen = counts
        counts = Counts()
        var hit: (incoming: IncomingRequest, recipe: HitMemo.Recipe)?
        if seen.hits > 0 {
            hit = answeredHit
            answeredHit = nil
        }
        guard seen.watching, seen.heads == 1, seen.ends == 1, seen.others == 0 else { return false }
        if let bytes, seen.hits == 1, let (incoming, recipe) = hit {
            remember(bytes, incoming, recipe)
        }
        return true
    }
}
