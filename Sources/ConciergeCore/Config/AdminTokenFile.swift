import Foundation

/// Reads and vets `admin.token_file` the way ssh vets a private key: it must exist, be
/// readable, hold a token on its first line, and be readable by its owner only.
public enum AdminTokenFile {
    /// Why a token file cannot be used; each is a config error naming `admin.token_file`.
    public enum Problem: Error, Sendable, Equatable, CustomStringConvertible {
        case missing(String)
        case unreadable(String, String)
        case empty(String)
        case tooOpen(String, mode: Int)

        public var description: String {
            switch self {
            case .missing(let path): return "token file \(path) does not exist"
            case .unreadable(let path, let reason): return "token file \(path) cannot be read: \(reason)"
            case .empty(let path): return "token file \(path) is empty"
            case .tooOpen(let path, let mode):
                return "token file \(path) is readable by group or others (mode \(String(mode, radix: 8))); chmod 600 it"
            }
        }

        /// The config error `concierge serve` and `check-config` report (exit 78).
        public var configError: ConfigError {
            ConfigError(file: nil, issues: [ConfigIssue(path: "admin.token_file", line: nil, message: description)])
        }
    }

    /// The token (first line, trimmed), or why there is none.
    public static func read(_ path: String) -> Result<String, Problem> {
        var info = stat()
        guard stat(path, &info) == 0 else {
            return errno == ENOENT ? .failure(.missing(path)) : .failure(.unreadable(path, String(cString: strerror(errno))))
        }
        if (info.st_mode & S_IFMT) == S_IFDIR { return .failure(.unreadable(path, "it is a directory")) }
        let mode = Int(info.st_mode & 0o777)
        if mode & 0o044 != 0 { return .failure(.tooOpen(path, mode: mode)) }
        guard let data = FileManager.default.contents(atPath: path) else {
            return .failure(.unreadable(path, access(path, R_OK) == 0 ? "read failed" : String(cString: strerror(errno))))
        }
        let firstLine = String(decoding: data, as: UTF8.self).split(whereSeparator: \.isNewline).first.map(String.init) ?? ""
        let token = firstLine.trimmingCharacters(in: .whitespaces)
        return token.isEmpty ? .failure(.empty(path)) : .success(token)
    }
}
