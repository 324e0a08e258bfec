/// The release version: the one place it is written. `concierge --version` prints it and
/// `make deb` names the package after it (it reads it back from the built binary).
public enum ConciergeVersion {
    public static let current = "0.1.0"
}
