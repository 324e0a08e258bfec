import ConciergeFuzzing
import Foundation

#if FUZZING
/// The target libFuzzer drives, chosen by `CONCIERGE_FUZZ_TARGET` (`scripts/fuzz.sh` sets it).
let selectedTarget: @Sendable ([UInt8]) -> Void = {
    let name = ProcessInfo.processInfo.environment["CONCIERGE_FUZZ_TARGET"] ?? ""
    guard let target = FuzzTargets.named(name) else {
        fatalError("CONCIERGE_FUZZ_TARGET must be one of \(FuzzTargets.names.joined(separator: ", ")), not '\(name)'")
    }
    return target
}()

/// libFuzzer's entry point (built by `scripts/fuzz.sh` with `-sanitize=fuzzer -DFUZZING`).
@_cdecl("LLVMFuzzerTestOneInput")
public func fuzzOneInput(_ data: UnsafePointer<UInt8>, _ size: Int) -> CInt {
    selectedTarget(Array(UnsafeBufferPointer(start: data, count: size)))
    return 0
}
#else
/// Without libFuzzer: `concierge-fuzz TARGET FILE_OR_DIR…` replays inputs through a target.
@main
struct FuzzReplay {
    static func main() {
        let arguments = Array(CommandLine.arguments.dropFirst())
        guard let name = arguments.first, let target = FuzzTargets.named(name) else {
            print("usage: concierge-fuzz \(FuzzTargets.names.joined(separator: "|")) FILE_OR_DIR…")
            exit(64)
        }
        let count = FuzzTargets.replay(Array(arguments.dropFirst()), through: target)
        print("\(name): \(count) inputs replayed, no crash")
    }
}
#endif
