/// A JSON object body kept as the client's text, its top-level members located: read by
/// name, and edited in place (a member's value replaced, a member added after the last one),
/// so every other byte reaches the upstream as sent: number literals such as
/// `12345678901234567891`, key order, escapes, white space and duplicate keys.
public struct JSONObjectText: Sendable {
    /// A top-level member: its decoded name and where its value's text lies.
    public struct Member: Sendable {
        public let name: String
        let value: Range<Int>
    }

    public private(set) var bytes: [UInt8]
    public private(set) var members: [Member]
    /// Where the object's closing brace is.
    private var closingBrace: Int

    /// `nil` unless `bytes` are one JSON object (RFC 8259, strictly: no byte-order mark,
    /// nothing after it but white space).
    public init?(_ bytes: [UInt8]) {
        guard let (members, closingBrace) = bytes.withUnsafeBufferPointer({ Self.scan($0) }) else { return nil }
        self.bytes = bytes
        self.members = members
        self.closingBrace = closingBrace
    }

    /// The first member of that name, decoded (duplicates: the first wins, as in the parser).
    public func value(of name: String) -> JSONValue? {
        members.first { $0.name == name }.flatMap(value(at:))
    }

    /// The value's text as written.
    public func literal(of member: Member) -> ArraySlice<UInt8> { bytes[member.value] }

    /// Members as parameters (cache key, signature): a string's decoded text, anything else
    /// as written, so two numbers that differ in a digit a `Double` cannot hold stay apart.
    public var params: [Param] {
        members.map { member in
            let text = literal(of: member)
            if text.first == UInt8(ascii: "\""), case .string(let s)? = value(at: member) { return Param(member.name, s) }
            return Param(member.name, String(decoding: text, as: UTF8.self))
        }
    }

    func value(at member: Member) -> JSONValue? {
        bytes.withUnsafeBufferPointer { JSONScan.decode(UnsafeBufferPointer(rebasing: $0[member.value])) }
    }

    /// Replaces the value of every member of that name (whichever of duplicates the upstream
    /// reads, it reads this one), or adds the member after the last one.
    public mutating func set(_ name: String, _ value: JSONValue, onlyIfAbsent: Bool = false) {
        let present = members.filter { $0.name == name }
        if onlyIfAbsent, !present.isEmpty { return }
        var edited = bytes
        let text = value.serializedBytes
        if present.isEmpty {
            var member: [UInt8] = members.isEmpty ? [] : [UInt8(ascii: ",")]
            JSONValue.writeString(name, into: &member)
            member.append(UInt8(ascii: ":"))
            member.append(contentsOf: text)
            edited.insert(contentsOf: member, at: members.last?.value.upperBound ?? closingBrace)
        } else {
            for member in present.reversed() { edited.replaceSubrange(member.value, with: text) }
        }
        // The edit keeps the text one object: scanning it again cannot fail.
        guard let scanned = JSONObjectText(edited) else { preconditionFailure("an edited JSON object no longer scans") }
        self = scanned
    }

    /// The top-level members and the closing brace's offset, or `nil` when the text is not
    /// one object.
    static func scan(_ buffer: UnsafeBufferPointer<UInt8>) -> ([Member], Int)? {
        var scanner = JSONScan.Scanner(bytes: buffer, path: [])
        scanner.skipWhitespace()
        guard scanner.index < buffer.count, buffer[scanner.index] == UInt8(ascii: "{") else { return nil }
        var members: [Member] = []
        if !scanner.opensEmpty(closer: UInt8(ascii: "}")) {
            while true {
                let keyStart = scanner.index
                guard keyStart < buffer.count, buffer[keyStart] == UInt8(ascii: "\""), let key = scanner.string() else { return nil }
                let name: String
                if key.escaped {
                    guard case .string(let decoded)? = JSONScan.decode(UnsafeBufferPointer(rebasing: buffer[keyStart..<scanner.index])) else { return nil }
                    name = decoded
                } else {
                    name = String(decoding: UnsafeBufferPointer(rebasing: buffer[key.range]), as: UTF8.self)
                }
                scanner.skipWhitespace()
                guard scanner.index < buffer.count, buffer[scanner.index] == UInt8(ascii: ":") else { return nil }
                scanner.index += 1
                scanner.skipWhitespace()
                let valueStart = scanner.index
                guard scanner.value(depth: 1, onPath: nil) else { return nil }
                members.append(Member(name: name, value: valueStart..<scanner.index))
                guard let closed = scanner.closes(with: UInt8(ascii: "}")) else { return nil }
                if closed { break }
            }
        }
        let closingBrace = scanner.index - 1
        guard scanner.atEndAfterWhitespace() else { return nil }
        return (members, closingBrace)
    }
}
