import NIOCore
import NIOHTTP1

/// HTTP/1.1 text (request and status lines, header fields) written in one pass into memory a
/// `ByteBuffer` reserved beforehand, instead of one `writeString` per piece (each a capacity
/// check, a uniqueness check and a copy call): replies, cached heads and upstream requests.
public struct WireText: WireSink {
    private let memory: UnsafeMutableRawBufferPointer
    public private(set) var count = 0

    private init(_ memory: UnsafeMutableRawBufferPointer) {
        self.memory = memory
    }

    /// What `fields` take on the wire at most: names, values, `": "` and CRLF.
    public static func size(of fields: HTTPHeaders) -> Int {
        fields.reduce(0) { $0 + $1.name.utf8.count + $1.value.utf8.count + 4 }
    }

    /// Writes at most `capacity` bytes with `write` at the end of `buffer`.
    public static func append(to buffer: inout ByteBuffer, capacity: Int, _ write: (inout WireText) -> Void) {
        buffer.writeWithUnsafeMutableBytes(minimumWritableBytes: capacity) { memory in
            var text = WireText(memory)
            write(&text)
            return text.count
        }
    }

    public mutating func put(_ text: String) {
        // Native strings lend their bytes without a copy of the string; others are copied once.
        if text.utf8.withContiguousStorageIfAvailable({ put(UnsafeRawBufferPointer($0)) }) != nil { return }
        var text = text
        text.withUTF8 { put(UnsafeRawBufferPointer($0)) }
    }

    public mutating func put(_ text: StaticString) {
        put(UnsafeRawBufferPointer(start: text.utf8Start, count: text.utf8CodeUnitCount))
    }

    /// A non-negative integer in decimal (20 bytes at most).
    public mutating func put(_ number: Int) {
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

    public mutating func put(_ bytes: UnsafeRawBufferPointer) {
        precondition(count + bytes.count <= memory.count, "wire text larger than reserved")
        UnsafeMutableRawBufferPointer(rebasing: memory[count...]).copyMemory(from: bytes)
        count += bytes.count
    }
}

/// Where HTTP/1.1 text goes: the wire (``WireText``) or a count of its bytes (``WireByteCount``,
/// which checks that what a head reserves, ``WireHead/maxByteCount``, covers what it writes).
public protocol WireSink {
    mutating func put(_ text: String)
    mutating func put(_ text: StaticString)
    /// A non-negative integer in decimal.
    mutating func put(_ number: Int)
}

/// Counts what a ``WireSink`` writer would write.
public struct WireByteCount: WireSink {
    public private(set) var count = 0

    public init() {}

    public mutating func put(_ text: String) { count += text.utf8.count }
    public mutating func put(_ text: StaticString) { count += text.utf8CodeUnitCount }
    public mutating func put(_ number: Int) {
        var value = number
        repeat {
            count += 1
            value /= 10
        } while value > 0
    }
}
