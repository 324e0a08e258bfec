import Dispatch
import Foundation
import NIOCore
import NIOPosix

/// The fuzz targets over ConciergeServer's request path (the others, over Core's parsers, are
/// ``ConciergeFuzzing/FuzzTargets``). Run as those are: under libFuzzer (`scripts/fuzz.sh`),
/// as a replay of files, and in the unit tests over `Fuzz/corpus/<name>`.
public enum ServerFuzzTargets {
    public static let names = ["misspaths"]

    public static func named(_ name: String) -> (@Sendable ([UInt8]) -> Void)? {
        switch name {
        case "misspaths": return missPaths
        default: return nil
        }
    }

    /// The two ways a miss is answered (on the event loop, awaited in a task) give the same
    /// reply bytes, report, upstream requests and stored entry for any request and upstream
    /// behaviour the input picks (``MissPathComparison``); a difference traps.
    public static func missPaths(_ data: [UInt8]) {
        let request = missPathRequest(data)
        let outcome = Bridge.wait { await MissPathFuzzing.shared.compare(request) }
        if case .differ(let difference) = outcome {
            preconditionFailure("the loop miss and the awaited miss differ for \(request): \(difference)")
        }
    }

    /// An input as a request: the endpoint, the upstream's behaviour and status from the first
    /// three bytes, a header from the fourth, and the rest as text (query, header value, body).
    public static func missPathRequest(_ data: [UInt8]) -> MissPathComparison.Request {
        func byte(_ i: Int) -> Int { i < data.count ? Int(data[i]) : 0 }
        let text = String(decoding: data.dropFirst(4), as: UTF8.self)
        // Printable ASCII in a header's value (what NIO's parser would let through).
        let value = String(text.unicodeScalars.filter { $0.value >= 0x20 && $0.value < 0x7F })
        let headers: [(name: String, value: String)?] = [nil, ("Accept", "application/json"), ("X-Client", value),
                                                         ("Cache-Control", "max-age=0"), ("Accept-Encoding", "gzip")]
        return MissPathComparison.Request(path: MissPathComparison.paths[byte(0) % MissPathComparison.paths.count],
                                          kind: byte(1) % MissPathComparison.kinds, status: byte(2),
                                          text: text, header: headers[byte(3) % headers.count])
    }
}

/// One comparison for the whole fuzzing process: two rigs, their writers, one event loop.
enum MissPathFuzzing {
    static let shared: MissPathComparison = {
        let loop = MultiThreadedEventLoopGroup.singleton.next()
        guard let comparison = try? MissPathComparison(loop: loop) else { fatalError("cannot set up the miss-path rigs") }
        // The writers run for the life of the process: libFuzzer's entry point is synchronous
        // and never returns to a structured scope that could own them.
        Thread.detachNewThread {
            Bridge.wait { await comparison.runWriters() }
        }
        // libFuzzer ends the process with `exit` (a time limit, a run count): the rigs' SQLite
        // files go then, not left in the temp directory by every fuzzing run.
        atexit { MissPathFuzzing.shared.removeFiles() }
        return comparison
    }()
}

/// Runs async work from synchronous code (libFuzzer's callback) and waits for its result.
enum Bridge {
    static func wait<T: Sendable>(_ work: @escaping @Sendable () async -> T) -> T {
        let semaphore = DispatchSemaphore(value: 0)
        let result = ResultBox<T>()
        // Unavoidable: a synchronous C callback has no task to await in.
        Task.detached {
            result.value = await work()
            semaphore.signal()
        }
        semaphore.wait()
        return result.value!
    }
}

/// The result handed from the task to the waiting thread: written once before the semaphore is
/// signalled and read once after it is waited for, so never touched by two threads at a time.
private final class ResultBox<T: Sendable>: @unchecked Sendable {
    var value: T?
}
