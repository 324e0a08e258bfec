import NIOCore
import NIOHTTP1

/// HTTP/1.1 text (request and status lines, header fields) written in one pass into memory a
/// `ByteBuffer` reserved beforehand, instead of one `writeString` per piece (each a capacity
/// check, a uniqueness check and a copy call): replies, cached heads and upstream requests.
struct WireText {
    private let memory: UnsafeMutableRawBufferPointer
    private(set) var count = 0

    private init(_ memory: UnsafeMutableRawBufferPointer) {
        self.memory = memory
    }

    /// What `fields` take on the wire at most: names, values, `": "` and CRLF.
    static func size(of fields: HTTPHeaders) -> Int {
        fields.reduce(0) { $0 + $1.name.utf8.count + $1.value.utf8.count + 4 }
    }

    /// Writes at most `capacity` bytes with `write` at the end of `buffer`.
    static func append(to buffer: inout ByteBuffer, capacity: Int, _ write: (inout WireText) -> Void) {
        buffer.writeWithUnsafeMutableBytes(minimumWritableBytes: capacity) { memory in
            var text = WireText(memory)
            write(&text)
            return text.count
        }
    }

    mutating func put(_ text: String) {
        var text = text
        text.withUTF8 { put(UnsafeRawBufferPointer($0)) }
    }

    mutating func put(_ text: StaticString) {
        put(UnsafeRawBufferPointer(start: text.utf8Start, count: text.utf8CodeUnitCount))
    }

    /// A non-negative integer in decimal (20 bytes at most).
    mutating func put(_ number: Int) {
        precondition(number >= 0, "negative number on the wire")
        var digits: (UInt64, UInt64, UInt64) = (0, 0, 0)
        withUnsafeMutableBytes(of: &digits) { scratch in
            var value = number
            var start = scratch.count
            repeat {
                start -= 1
                scratch[start] = UInt8(ascii: "0") + UInt8(value % 10)
                value /= 10
            } while value > 0
            put(UnsafeRawBufferPointer(rebasing: scratch[start...]))
        }
    }

    mutating func put(_ bytes: UnsafeRawBufferPointer) {
        precondition(count + bytes.count <= memory.count, "wire text larger than reserved")
        UnsafeMutableRawBufferPointer(rebasing: memory[count...]).copyMemory(from: bytes)
        count += bytes.count
    }
}
