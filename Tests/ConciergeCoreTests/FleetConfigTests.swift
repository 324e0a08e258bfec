@testable import ConciergeCore
import Foundation
import Testing

/// `fleet:`: the PostgreSQL URL and this node's place; and the seal of tokens stored there.
@Suite("Fleet configuration and token seal")
struct FleetConfigTests {
    static func load(_ fleet: String, environment: [String: String] = [:]) throws(ConfigError) -> ConciergeConfig {
        try ConfigLoader.parse(yaml: "upstreams:\n  release: https://api.example.com\nfleet:\n" + fleet, environment: environment)
    }

    static func issues(_ fleet: String) -> [ConfigIssue] {
        do {
            _ = try load(fleet)
            return []
        } catch {
            return error.issues
        }
    }

    @Test("a full section loads; the password comes from the environment and is masked")
    func fullSection() throws {
        let config = try Self.load("""
              postgres: "postgresql://concierge:${PGPASSWORD}@db.example.com:6432/concierge?sslmode=verify-full&sslrootcert=/etc/ca.pem"
              name: billing
              node: web-1
              key_file: /etc/concierge/fleet.key
              timeout: 150ms
              retention: 2h
            """, environment: ["PGPASSWORD": "s3cret-pw"])
        let fleet = try #require(config.fleet)
        #expect(fleet.postgres == ConciergeConfig.PostgresAddress(host: "db.example.com", port: 6432, username: "concierge", password: "s3cret-pw",
                                                                  database: "concierge", tls: .verifyFull, rootCertificate: "/etc/ca.pem"))
        #expect(fleet.postgres.masked == "postgresql://concierge:***@db.example.com:6432/concierge?sslmode=verify-full")
        #expect((fleet.name, fleet.node, fleet.keyFile) == ("billing", "web-1", "/etc/concierge/fleet.key"))
        #expect(fleet.timeout == .milliseconds(150))
        #expect(fleet.retention == .seconds(7200))
        #expect(config.secretValues.contains("s3cret-pw"))
    }

    @Test("defaults: name 'default', the host name as node, 200 ms, 24 h, TLS preferred; no section, no fleet")
    func defaults() throws {
        let fleet = try #require(try Self.load("  postgres: postgresql://c@127.0.0.1/db\n").fleet)
        #expect(fleet.name == "default")
        #expect(fleet.node == ProcessInfo.processInfo.hostName)
        #expect(fleet.timeout == .milliseconds(200))
        #expect(fleet.retention == .seconds(86_400))
        #expect(fleet.postgres.tls == .prefer)
        #expect(fleet.postgres.port == 5432)
        #expect(try ConfigLoader.parse(yaml: "upstreams:\n  release: https://api.example.com\n").fleet == nil)
    }

    @Test("a bad URL, a missing URL, a shared_cache that is not a boolean and bad durations name their key path")
    func errorsNameTheKeyPath() {
        #expect(Self.issues("  postgres: mysql://x@h/db\n").map(\.path) == ["fleet.postgres"])
        #expect(Self.issues("  postgres: postgresql://x@h/db?sslmode=maybe\n").first?.message.contains("sslmode must be") == true)
        #expect(Self.issues("  postgres: postgresql://h/db\n").first?.message == "the URL names no user")
        #expect(Self.issues("  postgres: postgresql://x@h/\n").first?.message == "the URL names no database")
        #expect(Self.issues("  name: x\n").map(\.path) == ["fleet.postgres"])
        #expect(Self.issues("  postgres: postgresql://x@h/db\n  shared_cache: sometimes\n").map(\.path) == ["fleet.shared_cache"])
        #expect(Self.issues("  postgres: postgresql://x@h/db\n  shared_cache: true\n").isEmpty)
        #expect(Self.issues("  postgres: postgresql://x@h/db\n  timeout: 0s\n").map(\.path) == ["fleet.timeout"])
        #expect(Self.issues("  postgres: postgresql://x@h/db\n  retention: 10s\n").map(\.path) == ["fleet.retention"])
        #expect(Self.issues("  postgres: postgresql://x@h/db\n  nodes: 3\n").first?.path.hasPrefix("fleet") == true)
    }

    @Test("sealed tokens open with the same key only; without a key they are marked plain")
    func seal() throws {
        let key = (0..<32).map { UInt8($0) }
        let seal = TokenSeal(keyBytes: key)
        let sealed = seal.seal("access-token-123")
        #expect(sealed.hasPrefix("gcm1:"))
        #expect(!sealed.contains("access-token-123"))
        #expect(try seal.open(sealed) == "access-token-123")
        #expect(seal.seal("access-token-123") != sealed, "a fresh nonce each time")
        #expect(throws: TokenSeal.SealError.self) { try TokenSeal(keyBytes: key.reversed()).open(sealed) }
        #expect(throws: TokenSeal.SealError.self) { try TokenSeal(keyBytes: nil).open(sealed) }
        #expect(TokenSeal(keyBytes: nil).seal("t") == "plain:t")
        #expect(try TokenSeal(keyBytes: nil).open("plain:t") == "t")
    }

    @Test("a key file: 32 raw bytes, hex or base64, never readable by others")
    func keyFile() throws {
        let dir = FileManager.default.temporaryDirectory.appendingPathComponent("fleet-key-\(UUID().uuidString)").path
        try FileManager.default.createDirectory(atPath: dir, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(atPath: dir) }
        let bytes = Data((0..<32).map { UInt8(255 - $0) })
        let forms: [(String, Data)] = [("raw", bytes), ("hex", Data(bytes.map { String(format: "%02x", $0) }.joined().utf8)),
                                       ("b64", Data((bytes.base64EncodedString() + "\n").utf8))]
        let reference = TokenSeal(keyBytes: Array(bytes)).seal("t")
        for (name, contents) in forms {
            let path = dir + "/" + name
            FileManager.default.createFile(atPath: path, contents: contents, attributes: [.posixPermissions: 0o600])
            #expect(try TokenSeal.load(keyFile: path).open(reference) == "t", "\(name)")
        }
        let open = dir + "/open"
        FileManager.default.createFile(atPath: open, contents: bytes, attributes: [.posixPermissions: 0o644])
        #expect(throws: TokenSeal.SealError.self) { try TokenSeal.load(keyFile: open) }
        let short = dir + "/short"
        FileManager.default.createFile(atPath: short, contents: Data([1, 2, 3]), attributes: [.posixPermissions: 0o600])
        #expect(throws: TokenSeal.SealError.self) { try TokenSeal.load(keyFile: short) }
    }
}
