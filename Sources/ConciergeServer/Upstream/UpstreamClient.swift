import AsyncHTTPClient
import ConciergeCore
import Foundation
import NIOCore
import NIOHTTP1
import NIOPosix
import NIOSSL

/// A request ready to go upstream: absolute URL, headers, body, and the one deadline of its
/// exchange.
public struct UpstreamRequest: Sendable {
    public var method: String
    /// The URL up to the request's own target: an upstream's `base_url` (scheme, authority and
    /// any path prefix), or the whole URL (``target`` then empty).
    public var base: String
    /// Path and query appended to ``base``; kept apart so the connection pool reads the origin
    /// of a known `base_url` without joining the two and splitting them again.
    public var target: String
    public var headers: HTTPHeaders
    public var body: Body
    /// The endpoint's `timeout` from when the request was made: the one deadline over the
    /// whole exchange (waiting for a connection, connecting, sending, the head and the body),
    /// whichever transport carries it.
    public var deadline: NIODeadline

    /// The absolute URL.
    public var url: String { target.isEmpty ? base : base + target }

    public init(method: String, url: String, headers: HTTPHeaders, body: Body, timeout: Duration) {
        self.init(method: method, base: url, target: "", headers: headers, body: body, timeout: timeout)
    }

    public init(method: String, base: String, target: String, headers: HTTPHeaders, body: Body, timeout: Duration) {
        (self.method, self.base, self.target, self.headers, self.body) = (method, base, target, headers, body)
        let (seconds, attoseconds) = timeout.components
        deadline = .now() + .nanoseconds(seconds * 1_000_000_000 + attoseconds / 1_000_000_000)
    }

    public enum Body: Sendable {
        case none
        case bytes(ByteBuffer)
        /// Streamed from the client; an error aborts the request (the connection is closed
        /// without the terminating chunk).
        case stream(StreamHandle<AsyncThrowingStream<ByteBuffer, any Error>>, length: Int?)
    }
}

/// A buffered upstream reply.
public struct UpstreamResponse: Sendable {
    public var status: Int
    public var headers: HTTPHeaders
    public var body: ByteBuffer
}

/// Why an upstream call produced no usable reply.
public enum UpstreamFailure: Error, Sendable, CustomStringConvertible {
    case timeout
    case unreachable(String)
    case tooLarge
    /// The client's streamed body broke (the client's fault, not the upstream's).
    case clientBody(String)

    public var description: String {
        switch self {
        case .timeout: return "upstream timed out"
        case .unreachable(let reason): return "upstream unreachable: \(reason)"
        case .tooLarge: return "upstream reply too large"
        case .clientBody(let why): return "client body broke: \(why)"
        }
    }
}

/// The pooled AsyncHTTPClient: streamed upstream exchanges and hooks go through it (buffered
/// ones take ``UpstreamConnectionPool`` in the daemon, see ``PooledUpstreamTransport``).
public final class UpstreamClient: Sendable {
    public let http: HTTPClient

    public init(eventLoopGroup: any EventLoopGroup) {
        var configuration = HTTPClient.Configuration()
        configuration.redirectConfiguration = .disallow
        configuration.timeout = .init(connect: .seconds(5), read: nil)
        configuration.connectionPool = .init(idleTimeout: .seconds(60), concurrentHTTP1ConnectionsPerHostSoftLimit: 64)
        // A refused connection fails the request at once (502 or the stale entry) instead of
        // retrying with backoff until the connect timeout (docs/hardening.md).
        configuration.connectionPool.retryConnectionEstablishment = false
        configuration.decompression = .disabled
        configuration.httpVersion = .http1Only
        http = HTTPClient(eventLoopGroupProvider: .shared(eventLoopGroup), configuration: configuration)
    }

    public func shutdown() async {
        try? await http.shutdown()
    }

    /// Sends a request and buffers the reply up to `maxBody` bytes.
    ///
    /// `request.deadline` is the one deadline over the whole exchange: connect, head and body (an
    /// upstream that dribbles its body is cut there, its connection closed).
    ///
    /// - Parameter tlsConfiguration: replaces the client's for this request (an upstream's `ca_file`).
    public func send(_ request: UpstreamRequest, maxBody: Int,
                     tlsConfiguration: TLSConfiguration?) async throws(UpstreamFailure) -> UpstreamResponse {
        do {
            // AsyncHTTPClient's deadline ends with the head; the body is read under the same one.
            let response = try await http.execute(makeRequest(request, tlsConfiguration: tlsConfiguration), deadline: request.deadline)
            var body = ByteBuffer()
            for try await var chunk in DeadlineBody(body: response.body, deadline: request.deadline).upstreamBody {
                guard body.readableBytes + chunk.readableBytes <= maxBody else { throw UpstreamFailure.tooLarge }
                body.writeBuffer(&chunk)
            }
            return UpstreamResponse(status: Int(response.status.code), headers: response.headers, body: body)
        } catch {
            throw Self.failure(error)
        }
    }

    public func send(_ request: UpstreamRequest, maxBody: Int) async throws(UpstreamFailure) -> UpstreamResponse {
        try await send(request, maxBody: maxBody, tlsConfiguration: nil)
    }

    /// Sends a request and hands back the reply with its body still streaming; the body
    /// ends with ``UpstreamFailure/timeout`` at `request.deadline`.
    public func stream(_ request: UpstreamRequest) async throws(UpstreamFailure) -> StreamedUpstreamReply {
        try await stream(request, tlsConfiguration: nil)
    }

    /// ``stream(_:)`` with `tlsConfiguration` replacing the client's (an upstream's `ca_file`).
    public func stream(_ request: UpstreamRequest, tlsConfiguration: TLSConfiguration?) async throws(UpstreamFailure) -> StreamedUpstreamReply {
        do {
            let response = try await http.execute(makeRequest(request, tlsConfiguration: tlsConfiguration), deadline: request.deadline)
            return StreamedUpstreamReply(status: Int(response.status.code), headers: response.headers,
                                         body: DeadlineBody(body: response.body, deadline: request.deadline).upstreamBody)
        } catch {
            throw Self.failure(error)
        }
    }

    static func failure(_ error: any Error) -> UpstreamFailure {
        if let e = error as? UpstreamFailure { return e }
        if let e = error as? HTTPClientError {
            if e == .deadlineExceeded || e == .readTimeout || e == .writeTimeout { return .timeout }
            if e == .connectTimeout { return .unreachable("connect timeout") }
        }
        if error is NIOTooManyBytesError { return .tooLarge }
        if let body = error as? ClientBodyFailure { return .clientBody("\(body)") }
        if error is CancellationError { return .unreachable("cancelled") }
        return .unreachable("\(error)")
    }

    func makeRequest(_ request: UpstreamRequest, tlsConfiguration: TLSConfiguration? = nil) -> HTTPClientRequest {
        var r = HTTPClientRequest(url: request.url)
        r.tlsConfiguration = tlsConfiguration
        r.method = HTTPMethod(rawValue: request.method)
        r.headers = request.headers
        switch request.body {
        case .none: break
        case .bytes(let buffer): r.body = .bytes(buffer)
        case .stream(let stream, let length):
            r.body = .stream(stream.stream, length: length.map { .known(Int64($0)) } ?? .unknown)
        }
        return r
    }
}
