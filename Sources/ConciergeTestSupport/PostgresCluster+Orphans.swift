import Foundation

/// Clusters whose test process is gone. Each cluster's directory names the process that
/// started it (``ownerFile``); a suite killed before its clusters' ``PostgresCluster/stop()``
/// left their servers running. The first cluster a test process starts stops and removes those
/// first (``reclaimOrphans(in:)``, from ``PostgresCluster/Template``).
extension PostgresCluster {
    /// The PID of the test process that started the cluster, in its directory.
    static let ownerFile = "owner.pid"

    static func recordOwner(in directory: String) throws {
        try Data("\(getpid())\n".utf8).write(to: URL(fileURLWithPath: directory).appendingPathComponent(ownerFile))
    }

    /// Stops (`pg_ctl -m immediate`) and removes every cluster under `root` whose owner process
    /// no longer runs; a cluster with no owner file (one being made, or by an older version) or
    /// whose owner runs is left alone. - Returns: the directories removed.
    @discardableResult
    static func reclaimOrphans(in root: String = FileManager.default.temporaryDirectory.path) async -> [String] {
        guard let binaries = installedBinaries else { return [] }
        let entries = (try? FileManager.default.contentsOfDirectory(atPath: root)) ?? []
        var removed: [String] = []
        for entry in entries where entry.hasPrefix("concierge-pg-") && !entry.hasPrefix("concierge-pg-template-") {
            let directory = "\(root)/\(entry)"
            guard let text = FileManager.default.contents(atPath: "\(directory)/\(ownerFile)"),
                  let owner = pid_t(String(decoding: text, as: UTF8.self).trimmingCharacters(in: .whitespacesAndNewlines)),
                  !isRunning(owner) else { continue }
            if FileManager.default.fileExists(atPath: "\(directory)/data/postmaster.pid") {
                _ = try? await runTool("\(binaries)/pg_ctl", ["-D", "\(directory)/data", "-m", "immediate", "-w", "-t", "30", "stop"],
                                       asPostgres: getuid() == 0)
            }
            try? FileManager.default.removeItem(atPath: directory)
            removed.append(directory)
        }
        return removed
    }

    /// Whether a process with this PID runs (one of another user counts: `EPERM`; a zombie,
    /// ended and not yet reaped by its parent, does not).
    static func isRunning(_ pid: pid_t) -> Bool {
        guard Glibc.kill(pid, 0) == 0 || errno == EPERM else { return false }
        return statFields(of: pid)?.first != "Z"
    }
}
