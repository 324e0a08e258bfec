#if canImport(Glibc)
import Glibc
#endif
import Synchronization

/// Gives memory the process freed back to the system (glibc keeps freed heap in its arenas).
/// After the writer works off a long backlog of queued entries, their buffers are free but
/// would stay in the process's RSS.
public enum MemoryTrim {
    private static let last = Mutex<ContinuousClock.Instant?>(nil)

    /// At most once every 5 s.
    public static func returnFreedMemory() {
        let now = ContinuousClock.now
        let due = last.withLock { last -> Bool in
            if let previous = last, now - previous < .seconds(5) { return false }
            last = now
            return true
        }
        guard due else { return }
        #if canImport(Glibc)
        // malloc.h is not in the Glibc module: look the function up (absent on other libcs).
        typealias MallocTrim = @convention(c) (Int) -> Int32
        if let symbol = dlsym(UnsafeMutableRawPointer(bitPattern: 0), "malloc_trim") {
            _ = unsafeBitCast(symbol, to: MallocTrim.self)(0)
        }
        #endif
    }
}
