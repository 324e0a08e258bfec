/// One header field line of a plain head (``PlainReplyHead``, ``PlainRequestHead``): a token
/// name, a colon, optional white space, a value of visible ASCII with spaces and tabs inside
/// (none at its end: NIO's decoder keeps such white space in the value, so that line is the
/// decoder's), and CRLF. A line starting with white space is obs-fold, which is not plain.
enum PlainFieldLine: Equatable {
    /// The name's and the value's bytes; the reader is past the line's CRLF.
    case field(name: Range<Int>, value: Range<Int>)
    /// The bytes end inside a plain line so far.
    case needMore
    /// Not a plain line.
    case unusual

    /// Reads the line starting at `i` and moves `i` past it (only for ``field``).
    static func read(_ bytes: UnsafeRawBufferPointer, at i: inout Int) -> PlainFieldLine {
        let cr: UInt8 = 0x0D, lf: UInt8 = 0x0A
        let count = bytes.count
        var j = i
        while j < count, HTTPFieldSyntax.isTokenCharacter(bytes[j]) { j += 1 }
        guard j < count else { return .needMore }
        guard j > i, bytes[j] == 0x3A else { return .unusual }
        let name = i..<j
        j += 1
        while j < count, bytes[j] == 0x20 || bytes[j] == 0x09 { j += 1 }
        let valueStart = j
        // Eight plain bytes (0x20–0x7E) a step, to the first word that holds another (a CR, a
        // tab, anything the byte loop below judges); a value is most of a line.
        while j &+ 8 <= count, unusualBytes(bytes.loadUnaligned(fromByteOffset: j, as: UInt64.self)) == 0 { j &+= 8 }
        while j < count, bytes[j] != cr {
            let b = bytes[j]
            guard b == 0x09 || (b >= 0x20 && b < 0x7F) else { return .unusual }
            j += 1
        }
        guard j + 1 < count else { return .needMore }
        guard bytes[j + 1] == lf, j == valueStart || (bytes[j - 1] != 0x20 && bytes[j - 1] != 0x09) else { return .unusual }
        i = j + 2
        return .field(name: name, value: valueStart..<j)
    }

    /// Non-zero when one of the word's eight bytes is not plain visible ASCII or space: below
    /// 0x20, 0x7F, or 0x80 and above. (The subtractions' borrows run upwards only from a byte
    /// that is itself below 0x20 or 0x7F, so a word of plain bytes gives zero.)
    @inline(__always)
    static func unusualBytes(_ word: UInt64) -> UInt64 {
        let ones: UInt64 = 0x0101_0101_0101_0101, highs: UInt64 = 0x8080_8080_8080_8080
        let belowSpace = (word &- ones &* 0x20) & ~word & highs
        let delete = word ^ (ones &* 0x7F)
        let isDelete = (delete &- ones) & ~delete & highs
        return belowSpace | isDelete | (word & highs)
    }
}
