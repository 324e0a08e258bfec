import ConciergeFuzzing
import Foundation

#if FUZZING
/// libFuzzer's entry point (built by `scripts/fuzz.sh` with `-sanitize=fuzzer`).
@_cdecl("LLVMFuzzerTestOneInput")
public func fuzzOneInput(_ data: UnsafePointer<UInt8>, _ size: Int) -> CInt {
    FuzzTargets.cacheKey(Array(UnsafeBufferPointer(start: data, count: size)))
    return 0
}
#else
/// Without libFuzzer: replays the files and directories named on the command line.
@main
struct FuzzReplay {
    static func main() {
        let count = FuzzTargets.replay(Array(CommandLine.arguments.dropFirst()), through: FuzzTargets.cacheKey)
        print("fuzz-cachekey: \(count) inputs replayed, no crash")
    }
}
#endif
