import CPCRE2

/// An invalidation pattern over cache keys, in PCRE2 syntax, whose every match has a bounded
/// cost: PCRE2's match, depth and heap limits stop a pattern that backtracks without end
/// (`(?:a+)+$`) on the first key where it would, and the search is unanchored.
///
/// Compile once (``init(_:limits:)``, which gives PCRE2's own message for a bad pattern), then
/// match through a ``Matcher``, one per thread at a time.
public final class KeyPattern: @unchecked Sendable {
    // @unchecked: `code` is written only in init and freed in deinit; PCRE2 documents a compiled
    // pattern as read-only during matching and safe to share between threads. Each thread
    // matches with match data of its own (``Matcher``).
    private let code: OpaquePointer

    public let source: String
    public let limits: Limits

    /// What one match may cost; exceeding any is ``KeyPatternError/limitExceeded(_:)``.
    public struct Limits: Sendable, Equatable {
        /// PCRE2's match limit: how many times its internal match function may be called.
        public var match: UInt32
        /// How deep its backtracking may nest.
        public var depth: UInt32
        /// Heap for backtracking, in KiB.
        public var heapKiB: UInt32
        /// The longest pattern accepted, in bytes.
        public var patternBytes: Int

        public init(match: UInt32 = 1_000_000, depth: UInt32 = 10_000, heapKiB: UInt32 = 4_096, patternBytes: Int = 4_096) {
            (self.match, self.depth, self.heapKiB, self.patternBytes) = (match, depth, heapKiB, patternBytes)
        }
    }

    public init(_ source: String, limits: Limits = Limits()) throws(KeyPatternError) {
        guard source.utf8.count <= limits.patternBytes else {
            throw .invalid("the pattern is longer than \(limits.patternBytes) bytes")
        }
        var errorCode: Int32 = 0
        var errorOffset = 0
        let compiled = source.withCString { text in
            text.withMemoryRebound(to: UInt8.self, capacity: source.utf8.count) { bytes in
                pcre2_compile_8(bytes, source.utf8.count, UInt32(PCRE2_UTF | PCRE2_MATCH_INVALID_UTF), &errorCode, &errorOffset, nil)
            }
        }
        guard let compiled else {
            throw .invalid("\(Self.message(errorCode)) at offset \(errorOffset)")
        }
        code = compiled
        self.source = source
        self.limits = limits
    }

    deinit {
        pcre2_code_free_8(code)
    }

    /// A new matcher (match data and limits of its own) for one thread at a time.
    public func matcher() -> Matcher { Matcher(self) }

    /// Matches keys on one thread at a time: it owns PCRE2's match data and match context.
    public final class Matcher {
        private let pattern: KeyPattern
        private let data: OpaquePointer
        private let context: OpaquePointer

        init(_ pattern: KeyPattern) {
            self.pattern = pattern
            // Allocation failure of these small blocks is out of memory: nothing to recover.
            guard let data = pcre2_match_data_create_8(1, nil), let context = pcre2_match_context_create_8(nil) else {
                fatalError("PCRE2 could not allocate match data")
            }
            pcre2_set_match_limit_8(context, pattern.limits.match)
            pcre2_set_depth_limit_8(context, pattern.limits.depth)
            pcre2_set_heap_limit_8(context, pattern.limits.heapKiB)
            (self.data, self.context) = (data, context)
        }

        deinit {
            pcre2_match_data_free_8(data)
            pcre2_match_context_free_8(context)
        }

        /// Whether the pattern is found anywhere in the key's UTF-8 bytes.
        public func matches(_ key: UnsafeRawBufferPointer) throws(KeyPatternError) -> Bool {
            // PCRE2 takes a NULL subject of length 0 as the empty key.
            let rc = pcre2_match_8(pattern.code, key.baseAddress?.assumingMemoryBound(to: UInt8.self), key.count, 0, 0, data, context)
            if rc >= 0 { return true }
            switch rc {
            case PCRE2_ERROR_NOMATCH:
                return false
            case PCRE2_ERROR_MATCHLIMIT:
                throw .limitExceeded("the match limit (\(pattern.limits.match) steps)")
            case PCRE2_ERROR_DEPTHLIMIT:
                throw .limitExceeded("the depth limit (\(pattern.limits.depth))")
            case PCRE2_ERROR_HEAPLIMIT, PCRE2_ERROR_NOMEMORY:
                throw .limitExceeded("the heap limit (\(pattern.limits.heapKiB) KiB)")
            default:
                throw .limitExceeded("a PCRE2 error (\(KeyPattern.message(rc)))")
            }
        }

        public func matches(_ key: String) throws(KeyPatternError) -> Bool {
            var key = key
            let result = key.withUTF8 { bytes in
                Result { () throws(KeyPatternError) -> Bool in try matches(UnsafeRawBufferPointer(bytes)) }
            }
            return try result.get()
        }
    }

    /// PCRE2's text for an error code.
    static func message(_ code: Int32) -> String {
        var buffer = [UInt8](repeating: 0, count: 256)
        let n = pcre2_get_error_message_8(code, &buffer, buffer.count)
        return n > 0 ? String(decoding: buffer.prefix(Int(n)), as: UTF8.self) : "error \(code)"
    }
}

/// Why a pattern was refused.
public enum KeyPatternError: Error, Equatable, CustomStringConvertible {
    /// Not a valid pattern: PCRE2's message and where (an admin `400`).
    case invalid(String)
    /// Some key would take a match past a limit (an admin `422`, naming the limit).
    case limitExceeded(String)
    /// The scan over every key did not finish within its deadline (an admin `422`).
    case deadlineExceeded(Duration, keysScanned: Int)
    /// The daemon is stopping: the scan ended at once (an admin `503`).
    case cancelled

    public var description: String {
        switch self {
        case .invalid(let message): return "invalid pattern: \(message)"
        case .limitExceeded(let limit): return "the pattern exceeded \(limit) on a cache key; nothing was invalidated: simplify it"
        case .deadlineExceeded(let limit, let keys):
            return "the pattern's scan did not finish within \(limit) (\(keys) keys scanned); nothing was invalidated: simplify it"
        case .cancelled: return "the scan was cancelled: the daemon is stopping; nothing was invalidated"
        }
    }
}
