/// Builds a string from pieces in one byte array and one final copy: for the texts made on
/// every request (cache keys, canonical parameters, upstream targets), where `String`'s `+=`
/// costs a few hundred instructions a piece.
struct TextBuilder {
    private var bytes: [UInt8] = []

    init(capacity: Int) {
        bytes.reserveCapacity(capacity)
    }

    mutating func append(_ text: String) {
        bytes.append(contentsOf: text.utf8)
    }

    mutating func append(_ text: StaticString) {
        text.withUTF8Buffer { bytes.append(contentsOf: $0) }
    }

    /// One ASCII byte (a separator: cheaper than a one-byte `StaticString`).
    mutating func append(byte: UInt8) {
        bytes.append(byte)
    }

    var count: Int { bytes.count }

    mutating func removeLast() {
        bytes.removeLast()
    }

    mutating func append(_ piece: UnsafeBufferPointer<UInt8>) {
        bytes.append(contentsOf: piece)
    }

    mutating func append(_ number: Int) {
        if (0...9).contains(number) {
            bytes.append(UInt8(ascii: "0") + UInt8(number))
        } else {
            append(String(number))
        }
    }

    /// The text; the pieces were strings, so the bytes are valid UTF-8.
    var text: String { String(decoding: bytes, as: UTF8.self) }
}
