import ConciergeCore
import Foundation
import NIOHTTP1

/// The bodies of the fuzz targets (SPEC §10: hostile input never crashes). Each takes
/// arbitrary bytes and must return without trapping; each also checks an invariant, and a
/// broken one traps on purpose (`preconditionFailure`) so the fuzzer reports it.
///
/// They run three ways: under libFuzzer (`scripts/fuzz.sh`, built with
/// `-sanitize=fuzzer`), as a plain executable that replays files
/// (`concierge-fuzz config FILE…`), and in the unit tests, which replay the seed corpora
/// in `Fuzz/corpus/` (one folder per target name).
public enum FuzzTargets {
    public static let names = ["config", "subrequests", "cachekey", "jsonscan", "wirehead", "forwarded", "headboundary", "plainreply", "plainrequest"]

    /// The target of that name (also the corpus folder's name).
    public static func named(_ name: String) -> (@Sendable ([UInt8]) -> Void)? {
        switch name {
        case "config": return config
        case "subrequests": return subRequests
        case "cachekey": return cacheKey
        case "jsonscan": return jsonScan
        case "wirehead": return wireHead
        case "forwarded": return forwardedBytes
        case "headboundary": return headBoundary
        case "plainreply": return plainReply
        case "plainrequest": return plainRequest
        default: return nil
        }
    }

    /// The config loader: any text gives a config or errors, each with a message.
    public static func config(_ data: [UInt8]) {
        let text = String(decoding: data, as: UTF8.self)
        do {
            let config = try ConfigLoader.parse(yaml: text, environment: ["FUZZ_SECRET": "s3cret-value", "EMPTY": ""])
            // What the loader accepts must be buildable into requests without a trap.
            var headers = HTTPHeaders()
            for (name, value) in config.common.headers {
                guard HTTPFieldSyntax.problem(name: name, value: value) == nil else {
                    preconditionFailure("loader accepted an invalid common header \(name)")
                }
                headers.add(name: name, value: value)
            }
        } catch {
            for issue in error.issues where issue.message.isEmpty { preconditionFailure("config error without a message") }
        }
    }

    /// The batch and chain body parser with templating: any body is a list of sub-requests
    /// or a 400 message; every header that passes becomes an `HTTPHeaders` field.
    public static func subRequests(_ data: [UInt8]) {
        for listKey in ["requests", "steps"] {
            guard let list = try? SubRequestList.parse(data, listKey: listKey) else { continue }
            var headers = HTTPHeaders()
            if let literal = try? list.requests.flatMap({ (step) throws(SubRequestError) in try step.literalHeaders() }) {
                for (name, value) in literal { headers.add(name: name, value: value) }
            }
            guard (try? ChainTemplate.checkReferences(list.requests)) != nil else { continue }
            // Each step's "reply" is the whole input, so templates can reach into it.
            let reply = JSONValue.parse(data) ?? .null
            var bodies: [String: JSONValue] = [:]
            for step in list.requests {
                if let resolved = try? ChainTemplate.resolve(step, bodies) {
                    for (name, value) in resolved.headers { headers.add(name: name, value: value) }
                    guard resolved.path.hasPrefix("/") else { preconditionFailure("a resolved path lost its leading /") }
                }
                bodies[step.id] = reply
            }
        }
    }

    /// The code-only envelope read against the full parser: whenever the scan says the text
    /// is JSON, the parser agrees, and both find the same value at each path. The stored header
    /// list reader (``JSONPairList``) too: whatever it reads, the parser reads alike.
    public static func jsonScan(_ data: [UInt8]) {
        let full = JSONValue.parse(data)
        for path in ["code", "errcode", "meta.code", "data.0", "0.code", "a.b.c", ""] {
            switch JSONScan.value(at: path, in: data) {
            case .notJSON:
                continue
            case .missing:
                guard let full else { preconditionFailure("scan accepted what the parser refuses (path \(path))") }
                guard full[path: path] == nil else { preconditionFailure("scan missed the value at \(path)") }
            case .found(let value):
                guard let full else { preconditionFailure("scan accepted what the parser refuses (path \(path))") }
                guard full[path: path] == value else { preconditionFailure("scan and parser disagree at \(path)") }
            }
        }
        // A stored header list read without the parser: whenever the reader answers, the
        // parser reads the same pairs.
        if let pairs = JSONPairList.read(data) {
            guard case .array(let items)? = full, items.count == pairs.count else { preconditionFailure("pair list reader and parser disagree") }
            for (item, pair) in zip(items, pairs) {
                guard case .array(let parts) = item, parts.count == 2, parts[0].stringValue == pair.0, parts[1].stringValue == pair.1 else {
                    preconditionFailure("pair list reader and parser disagree on a pair")
                }
            }
        }
        // What the pipeline classifies without a tree: the same outcome and code as from the
        // whole reply, for every path (whatever the scan answered).
        for reader in envelopeReaders {
            for status in [200, 401] {
                let judged = reader.judge(data, status: status)
                guard judged.outcome == reader.classify(full, status: status), judged.code == reader.code(in: full) else {
                    preconditionFailure("envelope judged without a tree and parser disagree at \(reader.envelope.codePath)")
                }
            }
        }
    }

    /// One reader per path the scan target tries, with text codes and `success_when_missing`
    /// on, so every branch of the classification is reachable.
    static let envelopeReaders = ["code", "errcode", "meta.code", "data.0", "0.code", "a.b.c", ""].map { path in
        // The embedded default configuration's envelope, on each path.
        guard var envelope = try? ConfigLoader.embeddedDefault(upstream: "http://127.0.0.1:9", environment: [:]).envelope else {
            preconditionFailure("the embedded default configuration does not load")
        }
        envelope.codePath = path
        envelope.successCodes = [0, 200]
        envelope.refreshCodes = [801]
        envelope.logoutCodes = [802]
        envelope.successTextCodes = ["ok"]
        envelope.successWhenMissing = true
        return EnvelopeReader(envelope: envelope)
    }

    /// Replays files or directories of inputs through a target (the executables' `main`
    /// without libFuzzer); returns how many inputs ran.
    @discardableResult
    public static func replay(_ paths: [String], through target: ([UInt8]) -> Void) -> Int {
        var count = 0
        for path in paths {
            var isDirectory: ObjCBool = false
            guard FileManager.default.fileExists(atPath: path, isDirectory: &isDirectory) else { continue }
            let files = isDirectory.boolValue
                ? ((try? FileManager.default.contentsOfDirectory(atPath: path)) ?? []).sorted().map { "\(path)/\($0)" }
                : [path]
            for file in files {
                guard let data = FileManager.default.contents(atPath: file) else { continue }
                target(Array(data))
                count += 1
            }
        }
        return count
    }
}
