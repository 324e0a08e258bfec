@testable import ConciergeCore
import Testing

@Suite("Plain field line")
struct PlainFieldLineTests {
    @Test("a word is plain exactly when its eight bytes are 0x20–0x7E, whatever byte is elsewhere at whatever place")
    func unusualBytes() {
        for byte in UInt8.min...UInt8.max {
            for place in 0..<8 {
                for filler: UInt8 in [0x20, 0x41, 0x7E] {
                    var bytes = [UInt8](repeating: filler, count: 8)
                    bytes[place] = byte
                    let word = bytes.withUnsafeBytes { $0.loadUnaligned(as: UInt64.self) }
                    #expect((PlainFieldLine.unusualBytes(word) == 0) == (0x20...0x7E).contains(byte), "byte \(byte) at \(place)")
                }
            }
        }
    }

    @Test("long values are read a word at a time up to the line's end; a control byte or tab anywhere is judged by the byte loop")
    func longValues() {
        func read(_ text: [UInt8]) -> PlainFieldLine {
            var i = 0
            return text.withUnsafeBytes { PlainFieldLine.read($0, at: &i) }
        }
        let value = Array("0123456789abcdefghijklmnopqrstuvwxyz ABC".utf8)
        for length in 0...value.count {
            let line = Array("X-Long: ".utf8) + value[..<length] + [0x0D, 0x0A]
            let trimmed = value[..<length].last == 0x20 ? PlainFieldLine.unusual : .field(name: 0..<6, value: 8..<(8 + length))
            #expect(read(line) == trimmed, "length \(length)")
            #expect(read(Array(line.dropLast())) == .needMore || read(Array(line.dropLast())) == .unusual)
            for place in 0..<length {
                for byte: UInt8 in [0x00, 0x0A, 0x7F, 0x80, 0xFF] {
                    var bad = line
                    bad[8 + place] = byte
                    #expect(read(bad) == .unusual, "byte \(byte) at \(place) of \(length)")
                }
            }
        }
        // A tab inside a value is plain; a CR ends the value early only with its LF.
        #expect(read(Array("A: x\ty\r\n".utf8)) == .field(name: 0..<1, value: 3..<6))
    }
}
