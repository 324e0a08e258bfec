#if FUZZING
import CFuzzDriver
#endif
import ConciergeFuzzing
import ConciergeServerFuzzing
import Foundation

/// Every target by name: Core's parsers, then the request path's.
let allNames = FuzzTargets.names + ServerFuzzTargets.names

func target(named name: String) -> (@Sendable ([UInt8]) -> Void)? {
    FuzzTargets.named(name) ?? ServerFuzzTargets.named(name)
}

#if FUZZING
/// The target libFuzzer drives, chosen by `CONCIERGE_FUZZ_TARGET` (`scripts/fuzz.sh` sets it).
let selectedTarget: @Sendable ([UInt8]) -> Void = {
    let name = ProcessInfo.processInfo.environment["CONCIERGE_FUZZ_TARGET"] ?? ""
    guard let target = target(named: name) else {
        fatalError("CONCIERGE_FUZZ_TARGET must be one of \(allNames.joined(separator: ", ")), not '\(name)'")
    }
    return target
}()

/// The input callback libFuzzer's own `main` calls: a debug build links that `main` instead of
/// aliasing it to `concierge_fuzz_main` below, so without this symbol it does not link.
@_cdecl("LLVMFuzzerTestOneInput")
public func fuzzOneInput(_ data: UnsafePointer<UInt8>?, _ size: Int) -> CInt {
    selectedTarget(data.map { Array(UnsafeBufferPointer(start: $0, count: size)) } ?? [])
    return 0
}

/// The executable's entry point under libFuzzer in a release build (`scripts/fuzz.sh`, with
/// `-sanitize=fuzzer -DFUZZING`): SwiftPM aliases `main` to `concierge_fuzz_main`.
@_cdecl("concierge_fuzz_main")
public func fuzzMain(_ argc: CInt, _ argv: UnsafeMutablePointer<UnsafeMutablePointer<CChar>?>?) -> CInt {
    var count = argc
    var arguments = argv
    return LLVMFuzzerRunDriver(&count, &arguments) { data, size in
        selectedTarget(data.map { Array(UnsafeBufferPointer(start: $0, count: size)) } ?? [])
        return 0
    }
}
#else
/// Without libFuzzer: `concierge-fuzz TARGET FILE_OR_DIR…` replays inputs through a target.
@main
struct FuzzReplay {
    static func main() {
        let arguments = Array(CommandLine.arguments.dropFirst())
        guard let name = arguments.first, let target = target(named: name) else {
            print("usage: concierge-fuzz \(allNames.joined(separator: "|")) FILE_OR_DIR…")
            exit(64)
        }
        let count = FuzzTargets.replay(Array(arguments.dropFirst()), through: target)
        print("\(name): \(count) inputs replayed, no crash")
    }
}
#endif
