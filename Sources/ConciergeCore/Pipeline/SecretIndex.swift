/// The literal secrets no log line may contain, indexed for lines scrubbed against many of
/// them: a daemon with `per_client` instances holds the tokens of thousands of users, and
/// searching each line once per secret (``SecretRedactor/scrub(_:literals:)``) costs a line
/// time in proportion to them. Here a line is read once: at each byte a bit of a 64 Ki-bit
/// set of two-byte prefixes rejects almost every position, and the rest are looked up by
/// their first four bytes; the longest secret found at a position is masked and reading goes
/// on after it.
///
/// Built for a set of secrets, and grown as new ones appear (``add(_:)``: the scrubber adds a
/// token as it is issued, without reading every session's again). With few secrets
/// (``directLimit``) it scrubs as ``SecretRedactor/scrub(_:literals:)`` does.
public struct SecretIndex: Sendable {
    /// Up to this many secrets a line is searched for each in turn (a few tokens: the usual daemon).
    public static let directLimit = 8

    private var literals: [String]
    /// The secrets as bytes, by their first four bytes, longest first.
    private var byPrefix: [UInt32: [[UInt8]]] = [:]
    /// Bit `p` set when a secret starts with the two bytes whose value is `p`.
    private var twoBytePrefixes: [UInt64] = []

    /// - Parameter literals: secrets of fewer than 4 bytes are left out (they would mask
    ///   ordinary words).
    public init(_ literals: [String]) {
        self.literals = Array(Set(literals.filter { $0.utf8.count >= 4 }))
        if self.literals.count > Self.directLimit { index(self.literals) }
    }

    public var isEmpty: Bool { literals.isEmpty }
    /// The secrets held.
    public var count: Int { literals.count }

    /// Adds secrets (those held already, and those under 4 bytes, are left out): the cost is
    /// the new secrets', not the index's.
    public mutating func add(_ new: [String]) {
        let wasDirect = literals.count <= Self.directLimit
        var added: [String] = []
        for literal in new where literal.utf8.count >= 4 && !contains(literal) && !added.contains(literal) { added.append(literal) }
        guard !added.isEmpty else { return }
        literals += added
        guard literals.count > Self.directLimit else { return }
        index(wasDirect ? literals : added)
    }

    private func contains(_ literal: String) -> Bool {
        guard literals.count > Self.directLimit else { return literals.contains(literal) }
        let bytes = Array(literal.utf8)
        return byPrefix[bytes.withUnsafeBufferPointer { Self.prefix4($0, 0) }]?.contains(bytes) ?? false
    }

    /// Puts `literals` (4 bytes or more, not held yet) in the prefix tables.
    private mutating func index(_ literals: [String]) {
        if twoBytePrefixes.isEmpty { twoBytePrefixes = [UInt64](repeating: 0, count: 1024) }
        var touched = Set<UInt32>()
        for literal in literals {
            let bytes = Array(literal.utf8)
            let prefix = bytes.withUnsafeBufferPointer { Self.prefix4($0, 0) }
            byPrefix[prefix, default: []].append(bytes)
            touched.insert(prefix)
            let two = Int(bytes[0]) << 8 | Int(bytes[1])
            twoBytePrefixes[two >> 6] |= 1 << UInt64(two & 63)
        }
        for key in touched { byPrefix[key]!.sort { $0.count > $1.count } }
    }

    /// `text` with every secret replaced by ``SecretRedactor/mask``.
    public func scrub(_ text: String) -> String {
        if literals.isEmpty { return text }
        guard literals.count > Self.directLimit else { return SecretRedactor.scrub(text, literals: literals) }
        var contiguous = text
        return contiguous.withUTF8 { scrub($0) } ?? text
    }

    /// The scrubbed text, or `nil` when no secret is in `bytes`.
    private func scrub(_ bytes: UnsafeBufferPointer<UInt8>) -> String? {
        var out: [UInt8]? = nil
        var copiedUpTo = 0
        var i = 0
        while i + 4 <= bytes.count {
            let two = Int(bytes[i]) << 8 | Int(bytes[i + 1])
            guard twoBytePrefixes[two >> 6] & (1 << UInt64(two & 63)) != 0,
                  let candidates = byPrefix[Self.prefix4(bytes, i)],
                  let found = candidates.first(where: { Self.matches($0, in: bytes, at: i) }) else {
                i += 1
                continue
            }
            if out == nil {
                out = []
                out!.reserveCapacity(bytes.count)
            }
            out!.append(contentsOf: bytes[copiedUpTo..<i])
            out!.append(contentsOf: SecretRedactor.mask.utf8)
            i += found.count
            copiedUpTo = i
        }
        guard var out else { return nil }
        out.append(contentsOf: bytes[copiedUpTo...])
        return String(decoding: out, as: UTF8.self)
    }

    private static func prefix4(_ bytes: UnsafeBufferPointer<UInt8>, _ i: Int) -> UInt32 {
        UInt32(bytes[i]) | UInt32(bytes[i + 1]) << 8 | UInt32(bytes[i + 2]) << 16 | UInt32(bytes[i + 3]) << 24
    }

    private static func matches(_ secret: [UInt8], in bytes: UnsafeBufferPointer<UInt8>, at i: Int) -> Bool {
        guard i + secret.count <= bytes.count else { return false }
        for n in 4..<secret.count where bytes[i + n] != secret[n] { return false }
        return true
    }
}
