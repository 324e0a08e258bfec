import ConciergeCore
import NIOCore
import NIOHTTP1

/// A client request as a listener received it (or as a batch/chain step describes it).
public struct IncomingRequest: Sendable {
    public enum Body: Sendable {
        case buffered(ByteBuffer)
        /// Parts still arriving from the client (streamed endpoints). The stream throws
        /// when the client's body breaks (cut short, malformed, stalled), so the upstream
        /// request is aborted, never completed with what arrived.
        case stream(StreamHandle<AsyncThrowingStream<ByteBuffer, any Error>>, length: Int?)
    }

    public var method: String
    /// Origin-form target: path and query.
    public var target: String
    public var headers: HTTPHeaders
    public var body: Body
    public var clientAddress: String?
    /// Set for sub-requests of batch and chain (they may not nest).
    public var isSubRequest: Bool
    /// The endpoint, when the listener routed the request as its head arrived (so it is
    /// routed once); `nil` to route it in the pipeline.
    public var route: PreparedRequest.Route? = nil
    /// Who sent it, and the session its listener names (``SessionAccess``).
    public var identity = ConnectionIdentity.anonymous

    public init(method: String, target: String, headers: HTTPHeaders, body: Body = .buffered(ByteBuffer()),
                clientAddress: String? = nil, isSubRequest: Bool = false) {
        (self.method, self.target, self.headers, self.body) = (method, target, headers, body)
        (self.clientAddress, self.isSubRequest) = (clientAddress, isSubRequest)
    }
}

/// An HTTP reply to a client: status, headers, body, nothing else (what the request log and
/// the counters learn travels beside it, in a ``RequestReport``).
public struct ProxyReply: Sendable {
    public enum Body: Sendable {
        case buffer(ByteBuffer)
        case upstream(UpstreamBody)
        /// Server-Sent Events: text chunks until the stream ends.
        case events(StreamHandle<AsyncStream<ByteBuffer>>)
    }

    public var status: Int
    public var headers: HTTPHeaders
    public var body: Body

    public init(status: Int, headers: HTTPHeaders = HTTPHeaders(), body: Body) {
        self.status = status
        self.headers = headers
        self.body = body
    }

    /// A JSON reply Concierge makes itself.
    public static func json(_ status: Int, _ value: JSONValue, extraHeaders: HTTPHeaders = HTTPHeaders()) -> ProxyReply {
        var headers = extraHeaders
        headers.replaceOrAdd(name: "Content-Type", value: "application/json")
        return ProxyReply(status: status, headers: headers, body: .buffer(ByteBuffer(bytes: value.serializedBytes)))
    }

    public static func error(_ status: Int, _ message: String) -> ProxyReply {
        json(status, ["error": .string(message)])
    }

    public var bufferedBody: ByteBuffer? {
        if case .buffer(let b) = body { return b }
        return nil
    }
}

/// A reply with its report: what the pipeline and Concierge's own routes hand back.
public struct ProxyAnswer: Sendable {
    public var reply: ProxyReply
    public var report: RequestReport

    public init(_ reply: ProxyReply, _ report: RequestReport) {
        self.reply = reply
        self.report = report
    }
}

/// A stream held by reference. `AsyncStream` and `AsyncThrowingStream` are resilient types of
/// the standard library, whose size is known only at run time: an enum or a struct that held
/// one directly was copied and destroyed through run-time value witnesses, and with it every
/// value around it (a request's preparation, answer and result: ~470 instructions for each
/// copy, several a request, streamed or not). Boxed, such a copy is one retain.
public final class StreamHandle<Stream: Sendable>: Sendable {
    public let stream: Stream

    public init(_ stream: Stream) {
        self.stream = stream
    }
}
