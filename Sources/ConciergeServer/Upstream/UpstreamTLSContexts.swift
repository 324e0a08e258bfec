import NIOSSL
import Synchronization

/// The TLS client contexts for https upstreams, one per trust store (the system's, or a
/// `ca_file`), made on first use and shared by every event loop: loading trust roots is
/// done once, not per connection.
final class UpstreamTLSContexts: Sendable {
    private let contexts = Mutex<[String?: NIOSSLContext]>([:])

    /// TLS 1.2+ with full certificate and host name verification against `caFile`'s
    /// certificates, or the system trust store when nil.
    static func configuration(caFile: String?) -> TLSConfiguration {
        var configuration = TLSConfiguration.makeClientConfiguration()
        if let caFile { configuration.trustRoots = .file(caFile) }
        return configuration
    }

    func context(caFile: String?) throws -> NIOSSLContext {
        if let context = contexts.withLock({ $0[caFile] }) { return context }
        let context = try NIOSSLContext(configuration: Self.configuration(caFile: caFile))
        return contexts.withLock { known in
            if let existing = known[caFile] { return existing }
            known[caFile] = context
            return context
        }
    }
}
